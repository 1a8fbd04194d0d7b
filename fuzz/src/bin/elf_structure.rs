//! ELF and DWARF through the structure analysis (what hpcstruct-rs and hpcprof-rs run on every
//! binary a profile names): any file gives a scope tree or an error, never a panic or hang.
//! The analysis reads a path, so each input is written to a file in a private temporary
//! directory first.

use profiler::addr::Svma;
use std::io::Write;

fn main() {
    let dir = tempfile::tempdir().expect("a private scratch directory");
    let path = dir.path().join("input.elf");
    let options = structure::Options {
        threads: 1,
        loops: true,
    };
    afl::fuzz!(|bytes: &[u8]| {
        let Ok(mut f) = std::fs::File::create(&path) else {
            return;
        };
        if f.write_all(bytes).is_err() {
            return;
        }
        drop(f);
        let _ = structure::analyze_file(&path, &options).map(|a| a.tree.ids().count());
        let _ = structure::analyze_focused(&path, &[Svma(0x1000), Svma(0x401000)], &options);
    });
}
