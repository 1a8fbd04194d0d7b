//! `structure::DataLayout` on fixtures compiled at test time (`data_vars.c`, `data_vars.cc`),
//! each answer checked against an oracle that does not share its reading of DWARF: the symbol
//! table (`nm -S`) for the addresses and sizes of statics, the compiler's own `offsetof` and
//! `sizeof` printed by the fixture for layouts, the fixture's frame address at run time for
//! where a local lies from its frame's CFA, and the disassembly (`objdump -d`) for the return
//! addresses of allocation calls.

use crate::support::{compile, run_ok, scratch_dir};
use profiler::addr::Svma;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use structure::{DataLayout, Receiver, StaticVar, StructureError};

/// The C fixture, built -O2 PIE with a frame pointer (its CFA oracle needs one).
fn c_fixture(dir: &Path) -> PathBuf {
    compile(
        "data_vars.c",
        dir,
        "data_vars",
        &["-O2", "-g", "-fno-omit-frame-pointer", "-fPIE", "-pie"],
    )
}

/// `nm -S`: link name -> (address, size), for the symbols that state a size.
fn nm_sizes(exe: &Path) -> HashMap<String, (u64, u64)> {
    let out = run_ok(Command::new("nm").arg("-S").arg(exe));
    out.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let [addr, size, _kind, name] = w[..] else {
                return None;
            };
            let hex = |s: &str| u64::from_str_radix(s, 16).ok();
            Some((name.to_string(), (hex(addr)?, hex(size)?)))
        })
        .collect()
}

/// The `NAME VALUE` lines the fixture prints after `prefix`.
fn printed(output: &str, prefix: &str) -> HashMap<String, i64> {
    output
        .lines()
        .filter_map(|l| {
            let mut w = l.strip_prefix(prefix)?.split_whitespace();
            Some((w.next()?.to_string(), w.next()?.parse().ok()?))
        })
        .collect()
}

/// The return addresses of the calls to `malloc` in `function`, from `objdump -d`: the
/// address of the instruction after each call.
fn malloc_returns(exe: &Path, function: &str) -> Vec<Svma> {
    let out = run_ok(
        Command::new("objdump")
            .args(["-d", "--no-show-raw-insn"])
            .arg(exe),
    );
    let header = format!("<{function}>:");
    let body: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.ends_with(&header))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    let addr = |l: &str| u64::from_str_radix(l.trim().split(':').next()?, 16).ok();
    body.windows(2)
        .filter(|w| w[0].contains("call") && w[0].contains("<malloc@plt>"))
        .map(|w| Svma(addr(w[1]).expect("address after the call")))
        .collect()
}

fn static_named<'a>(layout: &'a DataLayout, name: &str) -> &'a StaticVar {
    layout
        .statics()
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no static {name}: {:?}", layout.statics()))
}

/// Every static the fixture defines is found at the symbol table's address with its size,
/// through its whole extent and not one byte beyond.
#[test]
fn statics_match_the_symbol_table() {
    let dir = scratch_dir("structure_variables_statics");
    let exe = c_fixture(&dir);
    let layout = DataLayout::read(&exe).unwrap();
    let nm = nm_sizes(&exe);
    for (name, link) in [
        ("S", "S"),
        ("grid_arr", "grid_arr"),
        ("A", "A"),
        ("cells", "cells"),
        ("U", "U"),
        ("grid", "grid"),
        ("counter in f", "counter.0"),
    ] {
        let (addr, size) = nm[link];
        let (var, offset) = layout.static_at(Svma(addr)).unwrap();
        assert_eq!((var.name.as_str(), offset, var.size), (name, 0, size));
        let (last, offset) = layout.static_at(Svma(addr + size - 1)).unwrap();
        assert_eq!((last.name.as_str(), offset), (name, size - 1));
        let beyond = layout
            .static_at(Svma(addr + size))
            .map(|(v, _)| v.name.as_str());
        assert_ne!(beyond, Some(name), "{name} ends at its symbol's size");
        assert!(
            var.file
                .as_deref()
                .is_some_and(|f| f.ends_with("data_vars.c"))
                && var.line > 0,
            "{name}: declared at {:?}:{}",
            var.file,
            var.line
        );
    }
    assert!(layout.notes().is_empty(), "{:?}", layout.notes());
}

/// Offsets inside statics name the member or element the compiler put there.
#[test]
fn parts_are_members_and_elements() {
    let dir = scratch_dir("structure_variables_parts");
    let exe = c_fixture(&dir);
    let layout_of = printed(&run_ok(&mut Command::new(&exe)), "layout ");
    let layout = DataLayout::read(&exe).unwrap();

    let s = static_named(&layout, "S");
    let ty = s.ty.expect("S has a type");
    assert_eq!(s.size as i64, layout_of["sizeof.split"]);
    let cold_at = layout_of["split.cold"] as u64;
    let cold = layout.part_at(ty, cold_at).unwrap();
    assert_eq!(
        (cold.path.as_str(), cold.offset, cold.size),
        ("cold", cold_at, 8)
    );
    let hot = layout.part_at(ty, 8 * 5).unwrap();
    assert_eq!((hot.path.as_str(), hot.offset, hot.size), ("hot[5]", 40, 8));
    let element = hot.elements[0];
    assert_eq!(
        (element.index, element.elem_size, element.count),
        (5, 8, 64)
    );

    let grid = static_named(&layout, "grid_arr");
    assert_eq!(grid.size as i64, layout_of["sizeof.grid_arr"]);
    let grid_ty = grid.ty.unwrap();
    assert_eq!(layout.type_name(grid_ty), "double[10][20]");
    let at = layout.part_at(grid_ty, (3 * 20 + 4) * 8 + 7).unwrap();
    assert_eq!((at.path.as_str(), at.offset), ("[3][4]", (3 * 20 + 4) * 8));

    let cells = static_named(&layout, "cells");
    let cell_size = layout_of["sizeof.cell"] as u64;
    let cell_cold = layout_of["cell.cold"] as u64;
    let at = layout
        .part_at(cells.ty.unwrap(), 12 * cell_size + cell_cold)
        .unwrap();
    assert_eq!(at.path, "[12].cold");

    // The shape lists every member, sampled or not (`--fields`).
    let Some(structure::TypeShape::Record { members, .. }) = layout.type_shape(ty) else {
        panic!("S is a struct");
    };
    let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["hot", "cold"]);
    // Where a union's members overlap there is no single part.
    let u = static_named(&layout, "U");
    assert_eq!(layout.part_at(u.ty.unwrap(), 2), None);
    assert_eq!(layout.part_at(u.ty.unwrap(), 9).unwrap().path, "bytes[9]");
}

/// C++: a class's static member, a namespace's variable and a function static, by the
/// names people write.
#[test]
fn cxx_statics_are_qualified() {
    let dir = scratch_dir("structure_variables_cxx");
    let exe = compile("data_vars.cc", &dir, "data_vars_cc", &["-O2", "-g"]);
    let layout = DataLayout::read(&exe).unwrap();
    let nm = nm_sizes(&exe);
    for (name, link) in [
        ("Class::member", "_ZN5Class6memberE"),
        ("ns::x", "_ZN2ns1xE"),
        ("counter in f()", "_ZZ1fvE7counter"),
    ] {
        let (addr, size) = nm[link];
        let (var, offset) = layout.static_at(Svma(addr)).unwrap();
        assert_eq!((var.name.as_str(), offset, var.size), (name, 0, size));
    }
    // Without DWARF, the symbol table's names, demangled.
    let stripped = strip_debug(&dir, &exe);
    let layout = DataLayout::read(&stripped).unwrap();
    for (name, link) in [
        ("Class::member", "_ZN5Class6memberE"),
        ("f()::counter", "_ZZ1fvE7counter"),
    ] {
        let (addr, size) = nm[link];
        let (var, offset) = layout.static_at(Svma(addr + size - 1)).unwrap();
        assert_eq!((var.name.as_str(), offset), (name, size - 1));
    }
}

/// A 256 KiB local array of `deep` is found in `deep`'s frame where the running fixture saw
/// it, through its whole extent and not beyond.
#[test]
fn a_local_array_is_named_in_its_frame() {
    let dir = scratch_dir("structure_variables_local");
    let exe = c_fixture(&dir);
    let start = printed(&run_ok(&mut Command::new(&exe)), "")["lbuf-cfa"];
    let layout = DataLayout::read(&exe).unwrap();
    let (deep, size) = nm_sizes(&exe)["deep"];
    let len = 256 * 1024;
    for pc in [deep + size / 2, deep + size - 1] {
        let pc = Svma(pc);
        let hit = layout.local_at(pc, start).unwrap();
        assert_eq!(
            (hit.name, hit.scope, hit.offset, hit.size),
            ("lbuf", "deep", 0, len)
        );
        let hit = layout.local_at(pc, start + len as i64 - 1).unwrap();
        assert_eq!((hit.name, hit.offset), ("lbuf", len - 1));
        assert!(layout
            .local_at(pc, start - 1)
            .is_none_or(|h| h.name != "lbuf"));
        assert!(layout
            .local_at(pc, start + len as i64)
            .is_none_or(|h| h.name != "lbuf"));
        assert_eq!(layout.frame_name(pc), Some("deep"));
    }
    let (main, _) = nm_sizes(&exe)["main"];
    assert!(layout
        .local_at(Svma(main), start)
        .is_none_or(|h| h.name != "lbuf"));
}

/// Stripped of DWARF, the binary's statics are still named, and sized, by its symbol table.
#[test]
fn without_dwarf_the_symbol_table_names_statics() {
    let dir = scratch_dir("structure_variables_stripped");
    let exe = c_fixture(&dir);
    let stripped = strip_debug(&dir, &exe);
    let layout = DataLayout::read(&stripped).unwrap();
    let nm = nm_sizes(&exe);
    for name in ["A", "S", "grid_arr"] {
        let (addr, size) = nm[name];
        let (var, offset) = layout.static_at(Svma(addr + 3)).unwrap();
        assert_eq!(
            (var.name.as_str(), offset, var.size, var.ty),
            (name, 3, size, None)
        );
    }
    let (deep, size) = nm["deep"];
    assert_eq!(layout.local_at(Svma(deep + size / 2), -16), None);
    assert_eq!(layout.counts().1, 0, "no scopes without DWARF");
}

/// The receivers of the fixture's allocations: a global, a local, and none where the pointer
/// goes straight into a call.
#[test]
fn allocation_receivers() {
    let dir = scratch_dir("structure_variables_receivers");
    let exe = c_fixture(&dir);
    let layout = DataLayout::read(&exe).unwrap();
    let mut returns = Vec::new();
    for f in ["make_grid", "use_local", "unnamed"] {
        let ra = malloc_returns(&exe, f);
        assert_eq!(ra.len(), 1, "{f} calls malloc once");
        returns.extend(ra);
    }
    let got = layout.receivers(&exe, &returns).unwrap();
    assert_eq!(
        got,
        vec![
            Some(Receiver::Static("grid".into())),
            Some(Receiver::Local {
                name: "h1".into(),
                function: "use_local".into()
            }),
            None
        ]
    );
    // An address in no code names nothing.
    assert_eq!(layout.receivers(&exe, &[Svma(0)]).unwrap(), vec![None]);
}

/// The layout survives a postcard round trip (callers cache it).
#[test]
fn layout_round_trips_through_postcard() {
    let dir = scratch_dir("structure_variables_serde");
    let exe = c_fixture(&dir);
    let layout = DataLayout::read(&exe).unwrap();
    let bytes = postcard::to_allocvec(&layout).unwrap();
    let back: DataLayout = postcard::from_bytes(&bytes).unwrap();
    assert_eq!(back, layout);
    assert!(back.static_at(layout.statics()[0].addr).is_some());
}

/// Bad input is an error or a partial layout, never a panic: garbage, a missing file, a
/// binary cut short at many lengths, and one with bytes of its debug information flipped.
#[test]
fn bad_files_give_errors_not_panics() {
    let dir = scratch_dir("structure_variables_bad");
    let exe = c_fixture(&dir);
    let garbage = dir.join("garbage");
    std::fs::write(&garbage, b"\x7fELF this is not an ELF file at all").unwrap();
    assert!(matches!(
        DataLayout::read(&garbage),
        Err(StructureError::NotElf { .. })
    ));
    assert!(matches!(
        DataLayout::read(&dir.join("missing")),
        Err(StructureError::Io { .. })
    ));
    let bytes = std::fs::read(&exe).unwrap();
    let cut = dir.join("cut");
    for len in (0..bytes.len()).step_by(bytes.len() / 61 + 1) {
        std::fs::write(&cut, &bytes[..len]).unwrap();
        let _ = DataLayout::read(&cut);
    }
    // Flip bytes all over the file with a fixed-seed generator (xorshift).
    let flipped = dir.join("flipped");
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut read_ok = 0;
    for _ in 0..40 {
        let mut copy = bytes.clone();
        for _ in 0..24 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let at = (seed % copy.len() as u64) as usize;
            copy[at] ^= (seed >> 32) as u8 | 1;
        }
        std::fs::write(&flipped, &copy).unwrap();
        if let Ok(layout) = DataLayout::read(&flipped) {
            read_ok += 1;
            for s in layout.statics() {
                let _ = layout.static_at(s.addr);
                if let Some(ty) = s.ty {
                    let _ = layout.part_at(ty, s.size / 2);
                    let _ = layout.type_name(ty);
                }
            }
            let _ = layout.receivers(&flipped, &[Svma(0x1000)]);
        }
    }
    assert!(read_ok > 0, "some flipped copies still read");
}

/// What a layout says of the fixture, to compare layouts read from differently packaged
/// debug information: every static (name, address, size, type), and `lbuf` in `deep`.
fn summary(exe: &Path, layout: &DataLayout) -> (Vec<(String, u64, u64, String)>, String) {
    let statics = layout
        .statics()
        .iter()
        .map(|s| {
            let ty = s.ty.map(|t| layout.type_name(t)).unwrap_or_default();
            (s.name.clone(), s.addr.0, s.size, ty)
        })
        .collect();
    let start = printed(&run_ok(&mut Command::new(exe)), "")["lbuf-cfa"];
    let (deep, size) = nm_sizes(exe)["deep"];
    let local = layout
        .local_at(Svma(deep + size / 2), start + 100)
        .map(|h| format!("{} in {} +{}", h.name, h.scope, h.offset));
    (statics, local.unwrap_or_default())
}

/// The same answers from DWARF in a separate debug file (`.gnu_debuglink`), shared with
/// another program through dwz's supplementary file, and split into a `.dwo` file.
#[test]
fn debug_files_elsewhere_read_alike() {
    let dir = scratch_dir("structure_variables_debug_files");
    let flags = ["-O2", "-g", "-fno-omit-frame-pointer", "-fPIE", "-pie"];
    let exe = c_fixture(&dir);
    let want = summary(&exe, &DataLayout::read(&exe).unwrap());
    assert_eq!(want.1, "lbuf in deep +100");
    assert!(want
        .0
        .iter()
        .any(|s| s.0 == "grid_arr" && s.3 == "double[10][20]"));

    // A separate debug file named by .gnu_debuglink beside the stripped binary.
    let debug = dir.join("data_vars.debug");
    let stripped = dir.join("stripped");
    let objcopy = |args: &[&str]| run_ok(Command::new("objcopy").args(args).current_dir(&dir));
    objcopy(&["--only-keep-debug", "data_vars", "data_vars.debug"]);
    objcopy(&[
        "--strip-debug",
        "--add-gnu-debuglink=data_vars.debug",
        "data_vars",
        "stripped",
    ]);
    assert!(debug.is_file());
    assert_eq!(
        summary(&stripped, &DataLayout::read(&stripped).unwrap()),
        want
    );

    // dwz: two programs share their common entries in common.debug.
    let one = compile("data_vars.c", &dir, "dwz_one", &flags);
    let other = compile(
        "data_vars.c",
        &dir,
        "dwz_other",
        &[&flags[..], &["-DOTHER"]].concat(),
    );
    run_ok(
        Command::new("dwz")
            .args(["-m", "common.debug", "-M", "common.debug"])
            .arg(&one)
            .arg(&other)
            .current_dir(&dir),
    );
    let bytes = std::fs::read(&one).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    assert!(
        object::Object::gnu_debugaltlink(&file).unwrap().is_some(),
        "dwz wrote no .gnu_debugaltlink"
    );
    assert_eq!(summary(&one, &DataLayout::read(&one).unwrap()), want);

    // Split DWARF: the variables are in data_vars-split-data_vars.dwo.
    let split = compile(
        "data_vars.c",
        &dir,
        "split",
        &[&flags[..], &["-gsplit-dwarf"]].concat(),
    );
    let layout = DataLayout::read(&split).unwrap();
    assert!(layout.notes().is_empty(), "{:?}", layout.notes());
    assert_eq!(summary(&split, &layout), want);
}

/// A copy of `exe` in `dir` without its DWARF (`strip -g`).
fn strip_debug(dir: &Path, exe: &Path) -> PathBuf {
    let stripped = dir.join("stripped");
    run_ok(
        Command::new("strip")
            .arg("-g")
            .arg(exe)
            .arg("-o")
            .arg(&stripped),
    );
    stripped
}

/// Split DWARF with type units (GCC's `-gsplit-dwarf -fdebug-types-section`): the `.dwo`
/// holds the type unit and the compilation unit in two sections of one name, and the static's
/// class is named by signature; both are read.
#[test]
fn a_split_type_unit_gives_the_static_its_class() {
    let dir = scratch_dir("structure_variables_type_units");
    let flags = ["-O1", "-g", "-gsplit-dwarf", "-fdebug-types-section"];
    let exe = compile("data_types.cc", &dir, "types", &flags);
    let dwo = dir.join("types-data_types.dwo");
    let sections = run_ok(Command::new("readelf").arg("-SW").arg(&dwo));
    let units = sections.matches(" .debug_info.dwo ").count();
    assert_eq!(
        units, 2,
        "the fixture keeps its type unit apart:\n{sections}"
    );
    assert_grid_is_a_cell_array(&exe);
}

/// DWARF 4's split type units (`-gdwarf-4 -gsplit-dwarf -fdebug-types-section`): the class
/// lives in the `.dwo`'s `.debug_types.dwo`; then, packed into a `.dwp` (binutils' `dwp`, which
/// packs DWARF 4 only) with the `.dwo` gone, the package's type unit index finds it by its
/// signature.
#[test]
fn a_dwarf_4_split_type_unit_gives_the_static_its_class_from_a_dwo_and_a_dwp() {
    let dir = scratch_dir("structure_variables_dwp_type_units");
    let flags = [
        "-O1",
        "-g",
        "-gdwarf-4",
        "-gsplit-dwarf",
        "-fdebug-types-section",
    ];
    let exe = compile("data_types.cc", &dir, "types", &flags);
    let dwo = dir.join("types-data_types.dwo");
    let sections = run_ok(Command::new("readelf").arg("-SW").arg(&dwo));
    assert!(sections.contains(" .debug_types.dwo "), "{sections}");
    assert_grid_is_a_cell_array(&exe);
    run_ok(
        Command::new("dwp")
            .arg("-o")
            .arg(dir.join("types.dwp"))
            .arg(&dwo),
    );
    std::fs::remove_file(&dwo).unwrap();
    let sections = run_ok(
        Command::new("readelf")
            .arg("-SW")
            .arg(dir.join("types.dwp")),
    );
    assert!(sections.contains(" .debug_tu_index "), "{sections}");
    assert_grid_is_a_cell_array(&exe);
}

/// DWARF 4 with type units (`-gdwarf-4 -fdebug-types-section`): the class lives in the
/// `.debug_types` section, named from `.debug_info` by its signature.
#[test]
fn a_dwarf_4_type_unit_gives_the_static_its_class() {
    let dir = scratch_dir("structure_variables_debug_types");
    let flags = ["-O1", "-g", "-gdwarf-4", "-fdebug-types-section"];
    let exe = compile("data_types.cc", &dir, "types", &flags);
    let sections = run_ok(Command::new("readelf").arg("-SW").arg(&exe));
    assert!(sections.contains(" .debug_types "), "{sections}");
    assert_grid_is_a_cell_array(&exe);
}

/// The data-types fixture's `grid`, read from `exe`, is an array of 64 `Cell`s, its parts named.
fn assert_grid_is_a_cell_array(exe: &std::path::Path) {
    let layout = DataLayout::read(exe).unwrap();
    assert!(layout.notes().is_empty(), "{:?}", layout.notes());
    let grid = static_named(&layout, "grid");
    let ty = grid.ty.expect("grid has a type");
    assert_eq!(layout.type_name(ty), "Cell[64]");
    let at = layout.part_at(ty, 3 * 72 + 8 + 2 * 8).unwrap();
    assert_eq!(
        (at.path.as_str(), at.offset),
        ("[3].cold[2]", 3 * 72 + 8 + 2 * 8)
    );
}
