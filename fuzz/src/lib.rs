//! What each fuzz target does with one input, shared by the AFL++ harnesses (`src/bin/`) and
//! the end-to-end test that replays `tests/fuzz-regressions/` on every test run (it includes
//! this file as a module). Each function must return normally whatever the bytes: a panic,
//! hang or runaway allocation is a finding.

use std::path::Path;

use profiler::addr::Svma;

/// profile.db reader: a profile or an error; a profile that reads is well formed enough to
/// print whole.
pub fn profile_db(bytes: &[u8]) {
    let path = Path::new("fuzz.db");
    if let Ok(profile) = profiler::db::Profile::from_bytes(bytes, path) {
        let _ = format!("{profile:?}");
    }
}

/// .hpcdb reader and every view: a database that reads renders in all three views as text,
/// JSON and folded stacks.
pub fn hpcdb(bytes: &[u8]) {
    use correlate::render::{folded, json, text};
    use correlate::{callers, flat, top_down, Database, Selection};
    let Ok(db) = Database::from_bytes(bytes, Path::new("fuzz.hpcdb")) else {
        return;
    };
    for view in [
        top_down(&db, &Selection::All),
        callers(&db, &Selection::All),
        flat(&db, &Selection::All),
    ] {
        let mut sink = std::io::sink();
        let _ = text::render(&view, &text::TextOptions::default(), &mut sink);
        let _ = json::render(&view, &mut sink);
        let _ = folded::render(&view, 0, &mut sink);
    }
}

/// Structure-file reader: scope trees or an error; every tree that reads answers lookups.
pub fn structure_xml(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    let Ok(trees) = structure::read_structure(text, Path::new("fuzz.hpcstruct")) else {
        return;
    };
    for tree in &trees {
        for id in tree.ids() {
            if let Some(at) = tree.get(id).ranges.first().map(|r| r.start) {
                let _ = tree.lookup(Svma(at)).map(|s| tree.ancestors(s).count());
            }
        }
    }
}

/// ELF and DWARF through the whole-module and the focused structure analysis (what
/// hpcstruct-rs and hpcprof-rs run on every binary a profile names) and the data layout. Both
/// read a path: the input is written to `scratch` (a file in a private directory) first.
pub fn elf_structure(bytes: &[u8], scratch: &Path) {
    if std::fs::write(scratch, bytes).is_err() {
        return;
    }
    let options = structure::Options {
        threads: 1,
        loops: true,
    };
    let _ = structure::analyze_file(scratch, &options).map(|a| a.tree.ids().count());
    let _ = structure::analyze_focused(scratch, &[Svma(0x1000), Svma(0x401000)], &options);
    data_layout(scratch);
}

/// The data layout of the ELF file at `path` (what hpcprof-rs reads to name data addresses):
/// a layout or an error; a layout that reads answers every kind of question.
fn data_layout(path: &Path) {
    let Ok(layout) = structure::DataLayout::read(path) else {
        return;
    };
    for s in layout.statics() {
        let _ = layout.static_at(Svma(s.addr.0.saturating_add(s.size / 2)));
        if let Some(ty) = s.ty {
            let _ = (layout.part_at(ty, s.size / 2), layout.type_shape(ty));
            let _ = layout.type_name(ty);
        }
    }
    for pc in [0x1000, 0x1100, 0x401000] {
        let _ = (layout.local_at(Svma(pc), -16), layout.frame_name(Svma(pc)));
    }
    let _ = layout.receivers(path, &[Svma(0x1000), Svma(0x401000)]);
}
