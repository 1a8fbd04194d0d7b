//! Inputs: HPCToolkit-written structure files are accepted, our own structure file gives the
//! same answers as on-the-fly analysis, and bad inputs get clear errors naming the file.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::correlate_prof_common::{correlate, hpcprof, measure};
use crate::support::{compile, run_ok, scratch_dir, tool_command};
use correlate::{top_down, Database, DbNodeId, Selection};
use profiler::builder::{code, ProfileBuilder};
use profiler::db::{AddrKind, EventDesc, Profile, Sampling};

/// A one-thread profile of module `module` with one leaf sample per address in `ips`.
fn synthetic(module: &str, ips: &[(u64, u64)]) -> Profile {
    let event = EventDesc::new("cpu-clock", Sampling::Frequency(1000), "ns");
    let mut b = ProfileBuilder::new(module, event)
        .module(module)
        .thread(1, 1, "t");
    for &(ip, samples) in ips {
        b = b.path(&[code(0, ip, AddrKind::Ip)], samples, 1_000_000);
    }
    b.build()
}

/// Labels from the root down to `id`.
fn path_of(db: &Database, mut id: DbNodeId) -> Vec<String> {
    let mut out = Vec::new();
    while id != DbNodeId::ROOT {
        out.push(db.label(id));
        id = db.nodes[id.index()].parent;
    }
    out.reverse();
    out
}

/// The path of the node holding `samples` samples.
fn path_with(db: &Database, samples: u64) -> Vec<String> {
    let id = db
        .nodes
        .iter()
        .position(|n| {
            n.costs
                .iter()
                .any(|(_, mut c)| c.next().is_some_and(|c| c.samples == samples))
        })
        .expect("a node with those samples");
    path_of(db, DbNodeId::from_index(id))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// hpcprof-rs must fail with status 2 and a message naming `file` and containing `what`.
fn assert_rejected(o: &Output, file: &Path, what: &str) {
    let err = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(2),
        "exit status 2 for bad input: {err}"
    );
    assert!(
        err.contains(&file.display().to_string()),
        "names {}: {err}",
        file.display()
    );
    assert!(err.contains(what), "says {what:?}: {err}");
}

#[test]
fn hpctoolkit_structure_file_is_accepted() {
    let dir = scratch_dir("correlate_prof_inputs_hpctoolkit");
    let structure =
        PathBuf::from("/work/shared/hpcstruct-samples/inlines+loops-x86_64-gcc12-d.hpcstruct");
    let module = "/builds/hpctoolkit/hpctoolkit/tests/data/bin/inlines+loops-x86_64-gcc12-d";
    let profile = dir.join("p.db");
    synthetic(module, &[(0x1228, 5), (0x1130, 3), (0x1000, 2)])
        .write(&profile)
        .unwrap();
    let db = correlate(&dir, &[&structure, &profile], "p");
    assert_eq!(
        path_with(&db, 5),
        [
            "f4_1",
            "loop at inlines+loops.c: 53",
            "[I] f4_inline",
            "loop at inlines+loops.c: 48",
            "inlines+loops.c: 49"
        ]
    );
    assert_eq!(
        path_with(&db, 3),
        ["f2", "[I] f_inlined", "inlines+loops.c: 9"]
    );
    let inlined = db.nodes.iter().find(|n| n.name == "f_inlined").unwrap();
    assert_eq!(
        inlined.call_line,
        Some(19),
        "call site from the outer alien"
    );
    assert_eq!(path_with(&db, 2)[0], "_init");
    assert!(matches!(
        db.modules[0].structure,
        correlate::StructureSource::File(_)
    ));
}

#[test]
fn own_structure_file_matches_on_the_fly_analysis() {
    let dir = scratch_dir("correlate_prof_inputs_same");
    let bin = compile(
        "prof_callers.c",
        &dir,
        "callers",
        &["-O2", "-g", "-fomit-frame-pointer"],
    );
    let structure = dir.join("callers.hpcstruct");
    run_ok(
        tool_command("hpcstruct-rs")
            .arg(&bin)
            .arg("-o")
            .arg(&structure),
    );
    let profile = measure(&bin, &["5000000"], &dir, "callers");
    let fly = correlate(&dir, &[&profile], "fly");
    let file = correlate(&dir, &[&profile, &structure], "file");
    assert!(matches!(
        file.modules[0].structure,
        correlate::StructureSource::File(_)
    ));
    let (a, b) = (
        top_down(&fly, &Selection::All),
        top_down(&file, &Selection::All),
    );
    assert!(a.nodes.len() > 10, "a real tree");
    assert_eq!(
        a.nodes, b.nodes,
        "same tree from the file and from the binary"
    );
    // Quiet (-q): the same tree, and nothing said on success.
    let quiet = dir.join("quiet.hpcdb");
    let o = hpcprof(&dir, &[&profile], &["-q", "-o", quiet.to_str().unwrap()]);
    assert!(o.status.success() && o.stderr.is_empty(), "{}", stderr(&o));
    let quiet = Database::read(&quiet).unwrap();
    assert_eq!(top_down(&quiet, &Selection::All).nodes, a.nodes);
}

#[test]
fn bad_inputs_are_rejected_naming_the_file() {
    let dir = scratch_dir("correlate_prof_inputs_bad");
    let good = dir.join("good.db");
    synthetic("/nonexistent/app", &[(0x1000, 1)])
        .write(&good)
        .unwrap();
    let bytes = std::fs::read(&good).unwrap();

    let truncated = dir.join("truncated.db");
    std::fs::write(&truncated, &bytes[..bytes.len() - 3]).unwrap();
    assert_rejected(&hpcprof(&dir, &[&truncated], &[]), &truncated, "truncated");

    let future = dir.join("future.db");
    let mut v = bytes.clone();
    v[8] = 77;
    std::fs::write(&future, &v).unwrap();
    assert_rejected(&hpcprof(&dir, &[&future], &[]), &future, "version 77");

    let text = dir.join("notes.txt");
    std::fs::write(&text, "hello").unwrap();
    assert_rejected(
        &hpcprof(&dir, &[&good, &text], &[]),
        &text,
        "neither a profile.db",
    );

    // A structure file for another binary that happens to have the same name.
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let app = compile("prof_callers.c", &dir, "app", &["-O2", "-g"]);
    let wrong = compile(
        "prof_mixed.c",
        &other,
        "app",
        &["-O2", "-g", "-Wl,--no-as-needed", "-lm"],
    );
    let wrong_structure = dir.join("wrong.hpcstruct");
    run_ok(
        tool_command("hpcstruct-rs")
            .arg(&wrong)
            .arg("-o")
            .arg(&wrong_structure),
    );
    let app_profile = dir.join("app.db");
    synthetic(app.to_str().unwrap(), &[(0x1000, 1)])
        .write(&app_profile)
        .unwrap();
    let o = hpcprof(&dir, &[&app_profile, &wrong_structure], &["--no-cache"]);
    assert_rejected(&o, &wrong_structure, "does not describe");

    // The default output exists: it is not replaced.
    let out = dir.join("good.hpcdb");
    std::fs::write(&out, "precious").unwrap();
    assert_rejected(&hpcprof(&dir, &[&good], &[]), &out, "already exists");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "precious");
}
