//! `hpcview-rs` and `hpcprof-rs` on awkward inputs: databases without samples or without
//! metrics, names holding terminal control characters, and missing files.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::{scratch_dir, tool_command};
use correlate::{
    ChildIndex, Database, DbModuleId, DbNodeId, MetricDesc, ModuleDesc, NodeKey, NodeKind,
    StructureSource, ThreadDesc, ThreadIdx,
};
use profiler::builder::ProfileBuilder;
use profiler::db::{Cost, EventDesc, Sampling};

/// A database with `metrics` metrics whose `main` has `samples` samples in procedure `name`.
fn database(dir: &Path, metrics: usize, samples: u64, name: &str) -> PathBuf {
    let descs = (0..metrics)
        .map(|i| MetricDesc::new(format!("event{i}"), "events", Sampling::Period(1)))
        .collect();
    let mut db = Database::new(descs);
    db.modules.push(ModuleDesc {
        path: "/opt/app".into(),
        build_id: None,
        structure: StructureSource::OnTheFly,
    });
    db.threads.push(ThreadDesc {
        profile: 0,
        pid: 1,
        tid: 1,
        comm: "app".into(),
    });
    let key = NodeKey {
        module: Some(DbModuleId(0)),
        ..NodeKey::pseudo(NodeKind::Procedure, name)
    };
    let f = db.child(&mut ChildIndex::default(), DbNodeId::ROOT, key);
    let cost = Cost {
        samples,
        value: samples,
    };
    db.add_cost(f, ThreadIdx(0), &vec![cost; metrics]);
    db.compute_totals();
    let path = dir.join(format!("m{metrics}-s{samples}.hpcdb"));
    db.write_new(&path).expect("write");
    path
}

fn hpcview(db: &Path, args: &[&str]) -> Output {
    tool_command("hpcview-rs")
        .arg(db)
        .args(args)
        .output()
        .expect("run hpcview-rs")
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

#[test]
fn a_database_without_samples_or_metrics_gives_a_no_samples_view() {
    let dir = scratch_dir("view-inputs-empty");
    for db in [database(&dir, 1, 0, "main"), database(&dir, 0, 0, "main")] {
        for args in [
            &[][..],
            &["--json"],
            &["--folded"],
            &["--callers"],
            &["--flat"],
        ] {
            let o = hpcview(&db, args);
            let (out, err) = (text(&o.stdout), text(&o.stderr));
            assert!(
                o.status.success(),
                "{} {args:?}: {}{err}",
                db.display(),
                o.status
            );
            assert!(!err.contains("panicked"), "{err}");
            assert!(err.contains("no samples"), "{args:?}: {err}");
            if args == ["--json"] {
                let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
                assert_eq!(v["root"]["children"], serde_json::json!([]));
            }
        }
    }
}

#[test]
fn control_characters_in_names_are_escaped_in_text_only() {
    let dir = scratch_dir("view-inputs-control");
    let db = database(&dir, 1, 5, "evil\x1b[2J\x07name");
    let o = hpcview(&db, &["--color", "never"]);
    let out = text(&o.stdout);
    assert!(o.status.success());
    assert!(!out.contains('\x1b') && !out.contains('\x07'), "{out:?}");
    assert!(out.contains("evil\\x1b[2J\\x07name"), "{out}");
    let json = text(&hpcview(&db, &["--json"]).stdout);
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(v["root"]["children"][0]["name"], "evil\x1b[2J\x07name");
}

#[test]
fn errors_name_their_cause_once() {
    let dir = scratch_dir("view-inputs-errors");
    let missing = dir.join("missing.hpcdb");
    let o = hpcview(&missing, &[]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
    let o = tool_command("hpcprof-rs")
        .arg(dir.join("missing.db"))
        .output()
        .expect("run hpcprof-rs");
    let err = text(&o.stderr);
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
}

/// An empty one-thread profile of a run that started at `start_ns`, written to `path`.
fn write_profile(path: &Path, start_ns: u64) {
    let event = EventDesc::new("cpu-clock", Sampling::Period(1000), "ns");
    let profile = ProfileBuilder::new("app", event)
        .times(start_ns, start_ns + 1)
        .thread(1, 1, "app")
        .build();
    profile.write(path).expect("write the profile");
}

#[test]
fn the_same_measurement_twice_is_refused() {
    let dir = scratch_dir("prof-inputs-duplicate");
    let (a, copy, other) = (dir.join("a.db"), dir.join("copy.db"), dir.join("b.db"));
    let (a, copy, other) = (a.as_path(), copy.as_path(), other.as_path());
    write_profile(a, 1000);
    std::fs::copy(a, copy).expect("copy");
    write_profile(other, 2000);
    let hpcprof = |inputs: &[&Path], out: &str| {
        tool_command("hpcprof-rs")
            .args(inputs)
            .arg("--no-cache")
            .arg("-o")
            .arg(dir.join(out))
            .output()
            .expect("run hpcprof-rs")
    };
    for (inputs, out) in [([a, a], "twice.hpcdb"), ([a, copy], "copy.hpcdb")] {
        let o = hpcprof(&inputs, out);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("the same measurement as"), "{err}");
        assert!(!dir.join(out).exists());
    }
    let o = hpcprof(&[a, other], "two.hpcdb");
    assert!(o.status.success(), "{}", text(&o.stderr));
}
