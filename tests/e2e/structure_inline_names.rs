//! Inlined code is named as binutils' `addr2line -C -i -f` names it, whatever DWARF shape puts
//! the callee's name away from the inlined call:
//!
//! - rustc's ThinLTO between codegen units: a generic method of one crate (an rlib) is
//!   instantiated in one codegen unit of the binary and inlined into another, whose DWARF
//!   names it with `DW_FORM_ref_addr`, a reference into another compilation unit;
//! - a C++ method defined out of line: the abstract instance points with
//!   `DW_AT_specification` to the declaration in the class, which holds the link name;
//! - GCC's LTO (`-flto`): both, the abstract instance sitting in the early debug information
//!   of the defining translation unit, another compilation unit of the binary;
//! - dwz's multifile mode (`dwz -m`, as Debian and Fedora build their debug packages): the
//!   abstract instances of inline functions that several programs share move to a
//!   supplementary file named by `.gnu_debugaltlink`, referred to with `DW_FORM_GNU_ref_alt`;
//! - split DWARF (`gcc`/`clang -gsplit-dwarf`): the entries sit in a `.dwo` file per
//!   compilation unit (or a `.dwp` package made of them), joined to the binary's skeleton unit.
//!
//! For every line-table address of the calling procedure where addr2line names the callee,
//! the chain of the whole-module tree and of a focused analysis of those addresses (what
//! `hpcprof-rs` builds) equals addr2line's, function by function and line by line (call
//! lines included); the callee's scopes carry its declaration file and line; no inlined call
//! of the binary is left `<unknown>`. binutils 2.40 gives a callee declared in a dwz
//! supplementary file its caller's name, so there gdb names the functions of the chain; it does
//! not read `.dwo` files at all, so for split DWARF the chains are binutils' of the same program
//! built without `-gsplit-dwarf`, named by gdb reading the split program.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{
    compile, compile_all, fixture, marker, run, run_ok, scratch_dir, tool_command,
};
use profiler::addr::Svma;
use structure::line_table_addresses;
use structure::verify::{self, Frame, Naming, Oracle};
use structure::{analyze_file, analyze_focused, Options, ScopeTree};

/// What a check expects of the inlined calls to one callee.
struct Callee<'a> {
    /// Its name as `addr2line -C` prints it.
    name: &'a str,
    /// (fixture, marker) of each line it is called from.
    call_sites: &'a [(&'a str, &'a str)],
    /// (fixture, marker) of its definition: its declaration file and line.
    definition: (&'a str, &'a str),
}

/// The line-table addresses of `binary` inside the procedure named `procedure` in `tree`.
fn addresses_in(binary: &Path, tree: &ScopeTree, procedure: &str) -> Vec<Svma> {
    let proc_ = tree
        .procedures()
        .find(|&p| &*tree.get(p).name == procedure)
        .unwrap_or_else(|| panic!("{}: no procedure {procedure}", binary.display()));
    let ranges: Vec<_> = tree
        .descendants(proc_)
        .into_iter()
        .flat_map(|d| tree.get(d).ranges.clone())
        .collect();
    line_table_addresses(binary)
        .unwrap()
        .into_iter()
        .filter(|a| ranges.iter().any(|r| r.contains(&a.0)))
        .collect()
}

fn show(frames: &[Frame]) -> String {
    let names: Vec<String> = frames
        .iter()
        .map(|f| format!("{}:{}", f.function, f.line))
        .collect();
    names.join(" < ")
}

/// Who names the functions of the expected chains (binutils always gives their lines).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Names<'a> {
    /// binutils' `addr2line -C -i -f` itself.
    Addr2line,
    /// gdb, which reads dwz's supplementary files where binutils 2.40 gives an inlined callee
    /// declared there its caller's name, and names a C++ function without a link name the same
    /// way wherever it is in a chain (functions with one keep binutils' names:
    /// [`verify::gdb_chains`]).
    Gdb,
    /// Split DWARF, whose `.dwo` files binutils 2.40 does not read: binutils' chains of this
    /// program built without `-gsplit-dwarf` (the same code), named by gdb reading the split
    /// program itself (gdb reads `.dwo` and `.dwp` files).
    Unsplit(&'a Path),
}

/// The expected chain at each of `addrs`: binutils' `addr2line -C -i -f` frames, their
/// functions named by `names`.
fn expected_chains(binary: &Path, addrs: &[Svma], names: Names<'_>) -> Vec<Vec<Frame>> {
    let oracle = Oracle {
        program: "addr2line",
        naming: Naming::Readable,
    };
    let lines_from = match names {
        Names::Unsplit(twin) => twin,
        _ => binary,
    };
    let mut chains = verify::addr2line_frames(lines_from, addrs, &oracle).unwrap();
    if names != Names::Addr2line {
        let gdb = verify::gdb_chains(binary, addrs).unwrap();
        let same_frames = verify::rename(&mut chains, gdb.clone());
        let other = (addrs.iter().zip(&chains).zip(gdb)).zip(same_frames);
        let other: Vec<_> = other.filter(|(_, same)| !same).collect();
        assert!(
            other.is_empty(),
            "gdb sees other frames than binutils: {other:?}"
        );
    }
    chains
}

/// Assert that in `binary`, inside `procedure`, every address where the expected chain (see
/// [`expected_chains`]) holds one of `callees` gets that chain from both the whole-module and
/// the focused analysis, that each callee is seen at all and called from its call sites, that
/// its scopes carry its declaration, and that no inlined call of the binary is unnamed.
fn assert_named_like(binary: &Path, procedure: &str, names: Names<'_>, callees: &[Callee<'_>]) {
    let full = analyze_file(binary, &Options::default()).unwrap();
    let addrs = addresses_in(binary, &full.tree, procedure);
    assert!(!addrs.is_empty(), "{}: no addresses", binary.display());
    let theirs = expected_chains(binary, &addrs, names);
    let focused = analyze_focused(binary, &addrs, &Options::default()).unwrap();
    for callee in callees {
        let call_lines: Vec<u32> = callee
            .call_sites
            .iter()
            .map(|&(file, mark)| marker(file, mark))
            .collect();
        let mut seen = 0;
        for (&addr, their) in addrs.iter().zip(&theirs) {
            let Some(at) = their.iter().position(|f| f.function == callee.name) else {
                continue;
            };
            seen += 1;
            let call_line = their.get(at + 1).map_or(0, |f| f.line);
            assert!(
                call_lines.contains(&call_line),
                "{addr:#x}: {} called from line {call_line}, not {call_lines:?}",
                callee.name
            );
            for (what, tree) in [("whole-module", &full.tree), ("focused", &focused.tree)] {
                let ours = verify::tree_frames(tree, addr, Naming::Readable).unwrap_or_default();
                assert!(
                    verify::same_chain(&ours, their),
                    "{} {addr:#x}: {what} analysis says\n  {}\nthe oracle says\n  {}",
                    binary.display(),
                    show(&ours),
                    show(their)
                );
            }
        }
        assert!(
            seen > 0,
            "{}: the oracle never names {} in {procedure}: the fixture no longer inlines it",
            binary.display(),
            callee.name
        );
        assert_declared(&full.tree, callee);
    }
    let unknown = full
        .tree
        .ids()
        .filter(|&i| full.tree.get(i).is_alien() && &*full.tree.get(i).name == "<unknown>")
        .count();
    assert_eq!(unknown, 0, "{}: unnamed inlined calls", binary.display());
}

/// Every inlined-call scope of `callee` carries its declaration file and line.
fn assert_declared(tree: &ScopeTree, callee: &Callee<'_>) {
    let (file, mark) = callee.definition;
    let line = marker(file, mark);
    let scopes: Vec<_> = tree
        .ids()
        .filter(|&i| tree.get(i).is_alien() && &*tree.get(i).name == callee.name)
        .collect();
    assert!(!scopes.is_empty(), "no inlined call of {}", callee.name);
    for s in scopes {
        let declared = tree.scope_file(s).unwrap_or("");
        assert!(
            declared.ends_with(file) && tree.get(s).line == line,
            "{} declared at {declared}:{}, not {file}:{line}",
            callee.name,
            tree.get(s).line
        );
    }
}

#[test]
fn rust_generic_inlined_across_codegen_units_of_another_crate() {
    let dir = scratch_dir("structure-inline-names-rust");
    // Several codegen units (cargo's release default is 16), so that ThinLTO imports the
    // instantiated generic from one unit into another.
    let common = [
        "--edition",
        "2021",
        "-C",
        "opt-level=2",
        "-C",
        "codegen-units=4",
        "-g",
    ];
    let lib_flags = [
        &common[..],
        &["--crate-type", "rlib", "--crate-name", "histo"],
    ]
    .concat();
    let rlib = compile("inline_names_lib.rs", &dir, "libhisto.rlib", &lib_flags);
    let extern_histo = format!("histo={}", rlib.display());
    let bin_flags = [&common[..], &["--extern", &extern_histo]].concat();
    let exe = compile("inline_names_main.rs", &dir, "histo_main", &bin_flags);
    let record_sites = [
        ("inline_names_main.rs", "record_fill"),
        ("inline_names_main.rs", "record_refill"),
    ];
    assert_named_like(
        &exe,
        "inline_names_main::main",
        Names::Addr2line,
        &[
            Callee {
                name: "histo::Histogram<T>::record",
                call_sites: &record_sites,
                definition: ("inline_names_lib.rs", "record_def"),
            },
            Callee {
                name: "histo::bucket",
                call_sites: &[("inline_names_lib.rs", "bucket_call")],
                definition: ("inline_names_lib.rs", "bucket_def"),
            },
        ],
    );
}

/// The out-of-line methods of inline_names.h, inlined into `measure`.
const CXX_CALLEES: [Callee<'static>; 2] = [
    Callee {
        name: "meter::Gauge::scale(int) const",
        call_sites: &[("inline_names_main.cc", "call_add_scale")],
        definition: ("inline_names_method.cc", "scale_def"),
    },
    Callee {
        name: "meter::Accumulator<long>::add(long)",
        call_sites: &[("inline_names_main.cc", "call_add_scale")],
        definition: ("inline_names.h", "acc_add_def"),
    },
];

#[test]
fn cxx_methods_defined_out_of_line_and_inlined() {
    let dir = scratch_dir("structure-inline-names-cxx");
    // One translation unit: the method's definition is included, so -O2 inlines it.
    let method = fixture("inline_names_method.cc");
    let include = method.to_str().unwrap();
    let exe = compile(
        "inline_names_main.cc",
        &dir,
        "meter_o2",
        &["-O2", "-g", "-include", include],
    );
    assert_named_like(&exe, "measure(int)", Names::Addr2line, &CXX_CALLEES);
}

#[test]
fn cxx_link_time_optimized_inlining_across_translation_units() {
    let dir = scratch_dir("structure-inline-names-lto");
    let exe = compile_all(
        &["inline_names_main.cc", "inline_names_method.cc"],
        &dir,
        "meter_lto",
        &["-O2", "-g", "-flto"],
    );
    assert_named_like(&exe, "measure(int)", Names::Addr2line, &CXX_CALLEES);
}

#[test]
fn c_inline_functions_in_a_dwz_supplementary_file() {
    let dir = scratch_dir("structure-inline-names-dwz");
    let programs: Vec<_> = ["3", "7"]
        .iter()
        .map(|step| {
            let define = format!("-DSTEP={step}");
            compile(
                "inline_names_dwz.c",
                &dir,
                &format!("walk{step}"),
                &["-O2", "-g", &define],
            )
        })
        .collect();
    // dwz (installed by scripts/test) records the common file's name as given to -M: relative,
    // it is found beside the program (binutils 2.40 misses an absolute one).
    run_ok(
        Command::new("dwz")
            .arg("-m")
            .arg(dir.join("common.debug"))
            .args(["-M", "common.debug"])
            .args(&programs),
    );
    let bytes = std::fs::read(&programs[0]).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    assert!(
        object::Object::gnu_debugaltlink(&file).unwrap().is_some(),
        "dwz wrote no .gnu_debugaltlink"
    );
    assert_named_like(
        &programs[0],
        "walk",
        Names::Gdb,
        &[Callee {
            name: "manhattan",
            call_sites: &[("inline_names_dwz.c", "manhattan_call")],
            definition: ("inline_names_dwz.h", "manhattan_def"),
        }],
    );
}

/// Every procedure of a C++ program is named as binutils names the code at its entry: C++
/// names spelled as GNU's demangler spells them (forwarding constructors, `std::function`,
/// lambdas), and a function template instance whose DWARF has no link name (GCC omits it when
/// a lambda is among the template arguments) named in full from the symbol table, not by its
/// short DWARF name `apply_each<main(int, char**)::<lambda(long int)> >`.
/// Before, 4 of 17 were misnamed: 3 by their short DWARF names, 1 by the `cpp_demangle` crate.
#[test]
fn cxx_procedures_named_as_binutils_names_their_entries() {
    let dir = scratch_dir("structure-inline-names-procedures");
    let exe = compile("inline_names_lambda.cc", &dir, "lambda", &["-O2", "-g"]);
    let tree = analyze_file(&exe, &Options::default()).unwrap().tree;
    let procs: Vec<_> = tree.procedures().map(|p| tree.get(p)).collect();
    let entries: Vec<Svma> = procs.iter().map(|p| Svma(p.entry.unwrap())).collect();
    let oracle = Oracle {
        program: "addr2line",
        naming: Naming::Readable,
    };
    let theirs = verify::addr2line_frames(&exe, &entries, &oracle).unwrap();
    let (mut compared, mut wrong) = (0, Vec::new());
    for (p, chain) in procs.iter().zip(&theirs) {
        // One frame: no inlined code at the entry, so binutils names the procedure itself.
        let [frame] = chain.as_slice() else { continue };
        if frame.function == "??" {
            continue;
        }
        compared += 1;
        // Where it falls back on the symbol table, binutils also prints the symbol's clone
        // suffix (`[clone .constprop.0]`); a procedure is named after its source function.
        let theirs = frame.function.split(" [clone ").next().unwrap();
        if &*p.name != theirs {
            wrong.push(format!(
                "{:#x}: ours {}\n  binutils {theirs}",
                p.entry.unwrap(),
                p.name
            ));
        }
    }
    assert!(compared >= 12, "only {compared} procedures compared");
    assert!(
        wrong.is_empty(),
        "{} of {compared} misnamed:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    let lambda_instance = procs
        .iter()
        .find(|p| {
            p.link_name.as_deref() == Some("_Z10apply_eachIZ4mainEUllE0_ElRKSt6vectorIlSaIlEET_")
        })
        .expect("apply_each's lambda instance is a procedure, with its symbol's link name");
    assert_eq!(
        &*lambda_instance.name,
        "long apply_each<main::{lambda(long)#2}>(std::vector<long, std::allocator<long> > const&, main::{lambda(long)#2})"
    );
}

/// C++ functions without a link name (GCC gives none to a function of an anonymous namespace
/// or to template instances taking a lambda), inlined: named by their `DW_AT_name` qualified
/// by the namespaces and classes enclosing their declarations, as gdb names them and as a
/// demangled link name reads. binutils names them by the bare `DW_AT_name` where they call
/// (`twice`, `sum_with<...>`) and by the enclosing symbol where they are innermost. Before,
/// they were named by the bare `DW_AT_name`.
#[test]
fn cxx_functions_without_link_names_qualified_by_their_scopes() {
    let dir = scratch_dir("structure-inline-names-scopes");
    let exe = compile("inline_names_scopes.cc", &dir, "scopes", &["-O2", "-g"]);
    let fixture = "inline_names_scopes.cc";
    assert_named_like(
        &exe,
        "measure(long const*, int, int)",
        Names::Gdb,
        &[
            Callee {
                name: "geometry::(anonymous namespace)::twice",
                call_sites: &[(fixture, "twice_call")],
                definition: (fixture, "twice_def"),
            },
            Callee {
                name: "geometry::sum_with<measure(long int const*, int, int)::<lambda(long int)> >",
                call_sites: &[(fixture, "sum_with_call")],
                definition: (fixture, "sum_with_def"),
            },
            Callee {
                name: "geometry::Folder<int>::apply<measure(long int const*, int, int)::<lambda(int)> >",
                call_sites: &[(fixture, "apply_call")],
                definition: (fixture, "apply_def"),
            },
        ],
    );
}

/// The inline function of inline_names_dwz.c that `walk` calls.
const MANHATTAN: Callee<'static> = Callee {
    name: "manhattan",
    call_sites: &[("inline_names_dwz.c", "manhattan_call")],
    definition: ("inline_names_dwz.h", "manhattan_def"),
};

/// Build inline_names_dwz.c with `compiler`, `flags` and `-gsplit-dwarf` into `dir/name`,
/// compiling in `dir` so that the `.dwo` files go there; with `twin`, build it again without
/// `-gsplit-dwarf` into `dir/name_unsplit`, asserting that the code is the same. The twin has
/// DWARF 4, which binutils 2.40 reads fully (it misses clang's DWARF 5 range lists).
fn build_split(
    compiler: &str,
    dir: &Path,
    name: &str,
    flags: &[&str],
    twin: bool,
) -> (PathBuf, Option<PathBuf>) {
    let build = |out: &str, split: bool| {
        let mut command = Command::new(compiler);
        command.current_dir(dir).args(["-O2", "-g"]).args(flags);
        command.arg(if split { "-gsplit-dwarf" } else { "-gdwarf-4" });
        run_ok(
            command
                .arg(fixture("inline_names_dwz.c"))
                .arg("-o")
                .arg(out),
        );
        dir.join(out)
    };
    let exe = build(name, true);
    assert!(!dwo_files(dir).is_empty(), "{compiler} wrote no .dwo file");
    let twin = twin.then(|| build(&format!("{name}_unsplit"), false));
    if let Some(twin) = &twin {
        assert_eq!(text(&exe), text(twin), "-gsplit-dwarf changed the code");
    }
    (exe, twin)
}

/// The `.dwo` files in `dir`.
fn dwo_files(dir: &Path) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(dir).unwrap();
    let paths = entries.map(|e| e.unwrap().path());
    paths
        .filter(|p| p.extension().is_some_and(|e| e == "dwo"))
        .collect()
}

/// The bytes of `binary`'s `.text`.
fn text(binary: &Path) -> Vec<u8> {
    use object::{Object, ObjectSection};
    let bytes = std::fs::read(binary).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    let text = file.section_by_name(".text").unwrap();
    text.data().unwrap().to_vec()
}

/// Split DWARF from `compiler` with `flags`: named as the same program without it.
fn assert_split_named_like_unsplit(test: &str, compiler: &str, flags: &[&str]) {
    let dir = scratch_dir(test);
    let (exe, twin) = build_split(
        compiler,
        &dir,
        "walk",
        &[&["-DSTEP=3"], flags].concat(),
        true,
    );
    let twin = twin.unwrap();
    assert_named_like(&exe, "walk", Names::Unsplit(&twin), &[MANHATTAN]);
}

#[test]
fn split_dwarf_5_from_gcc_in_dwo_files() {
    assert_split_named_like_unsplit("structure-split-gcc", "gcc", &[]);
}

#[test]
fn split_dwarf_4_gnu_extension_from_gcc_in_dwo_files() {
    assert_split_named_like_unsplit("structure-split-gcc-dwarf4", "gcc", &["-gdwarf-4"]);
}

#[test]
fn split_dwarf_from_clang_in_dwo_files() {
    assert_split_named_like_unsplit("structure-split-clang", "clang", &[]);
}

/// A `.dwo` moved with its binary away from the compilation directory is found beside it; a
/// `.dwp` package beside the binary replaces the `.dwo` files and reads the same, whole-module
/// and focused, at every line-table address: one package from binutils' `dwp` (DWARF 4; it
/// crashes on DWARF 5), one from `llvm-dwp` (DWARF 5; gdb crashes on it, so the `.dwo` files,
/// checked against the oracle, are the reference).
#[test]
fn split_dwarf_in_a_dwp_package_or_moved_with_the_binary() {
    for (packager, version) in [("dwp", "-gdwarf-4"), ("llvm-dwp", "-gdwarf-5")] {
        let dir = scratch_dir(&format!("structure-split-{packager}"));
        let (exe, twin) = build_split("gcc", &dir, "walk", &["-DSTEP=3", version], true);
        let moved = dir.join("moved");
        std::fs::create_dir(&moved).unwrap();
        for file in dwo_files(&dir).into_iter().chain([exe.clone()]) {
            std::fs::copy(&file, moved.join(file.file_name().unwrap())).unwrap();
        }
        let twin = twin.unwrap();
        assert_named_like(
            &moved.join("walk"),
            "walk",
            Names::Unsplit(&twin),
            &[MANHATTAN],
        );
        let with_dwo = analyze_file(&exe, &Options::default()).unwrap().tree;
        let package = dir.join("walk.dwp");
        let mut command = Command::new(packager);
        run_ok(
            command
                .current_dir(&dir)
                .arg("-e")
                .arg(&exe)
                .arg("-o")
                .arg(package),
        );
        for dwo in dwo_files(&dir) {
            std::fs::remove_file(dwo).unwrap();
        }
        let addrs = line_table_addresses(&exe).unwrap();
        let full = analyze_file(&exe, &Options::default()).unwrap();
        let focused = analyze_focused(&exe, &addrs, &Options::default()).unwrap();
        assert!(
            full.summary.skipped.is_empty(),
            "{:?}",
            full.summary.skipped
        );
        for addr in addrs {
            let want = verify::tree_frames(&with_dwo, addr, Naming::Readable);
            for tree in [&full.tree, &focused.tree] {
                let got = verify::tree_frames(tree, addr, Naming::Readable);
                assert_eq!(got, want, "{packager}: {addr:#x}");
            }
        }
        assert!(full
            .tree
            .ids()
            .any(|i| &*full.tree.get(i).name == "manhattan"));
    }
}

/// A `.dwo` that is missing, or left from another build (its DWO id differs), is reported
/// once by name; the procedures are still there, named from the symbol table.
#[test]
fn split_dwarf_missing_or_stale_dwo_is_reported_and_symbols_still_name_procedures() {
    let dir = scratch_dir("structure-split-missing");
    let (exe, _) = build_split("gcc", &dir, "walk", &["-DSTEP=3"], false);
    let [dwo] = dwo_files(&dir).try_into().unwrap();
    let fresh = std::fs::read(&dwo).unwrap();
    std::fs::remove_file(&dwo).unwrap();
    let out = run(tool_command("hpcstruct-rs")
        .arg(&exe)
        .arg("-o")
        .arg(dir.join("walk.hpcstruct")));
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let name = dwo.file_name().unwrap().to_string_lossy();
    let warnings: Vec<_> = stderr.lines().filter(|l| l.contains(&*name)).collect();
    assert!(
        warnings.len() == 1 && warnings[0].contains("not found"),
        "one warning naming {name}:\n{stderr}"
    );
    let xml = std::fs::read_to_string(dir.join("walk.hpcstruct")).unwrap();
    let procedure = xml
        .lines()
        .find(|l| l.starts_with("<P ") && l.contains(" n=\"walk\""));
    assert!(procedure.is_some(), "no procedure walk:\n{xml}");
    // A .dwo of another build (another STEP) at the same path is refused as stale.
    let other = scratch_dir("structure-split-missing-other");
    build_split("gcc", &other, "walk", &["-DSTEP=7"], false);
    let [stale] = dwo_files(&other).try_into().unwrap();
    std::fs::copy(stale, &dwo).unwrap();
    let analysis = analyze_file(&exe, &Options::default()).unwrap();
    let notes: Vec<_> = analysis
        .summary
        .skipped
        .iter()
        .filter(|l| l.contains(&*name))
        .collect();
    assert!(
        notes.len() == 1 && notes[0].contains("stale"),
        "{:?}",
        analysis.summary.skipped
    );
    assert!(analysis
        .tree
        .procedures()
        .any(|p| &*analysis.tree.get(p).name == "walk"));
    std::fs::write(&dwo, fresh).unwrap();
    let analysis = analyze_file(&exe, &Options::default()).unwrap();
    assert!(
        analysis.summary.skipped.is_empty(),
        "{:?}",
        analysis.summary.skipped
    );
    assert!(analysis
        .tree
        .ids()
        .any(|i| &*analysis.tree.get(i).name == "manhattan"));
}
