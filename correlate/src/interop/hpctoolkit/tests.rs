//! The format both ways in memory: a database written and read back gives the same views, and
//! damaged copies of a database HPCToolkit wrote give errors that name the file, never a panic.

use std::path::Path;

use fxhash::FxHashMap;
use profiler::db::{Cost, Sampling};

use super::meta::meta_db;
use super::read::read_bytes;
use super::trace::trace_db;
use super::values::{planes, profile_db};
use super::{export, import};
use crate::db::database::ThreadDesc;
use crate::db::ids::{DbNodeId, ThreadIdx};
use crate::db::node::{ChildIndex, NodeKey, NodeKind};
use crate::render::json;
use crate::{Database, MetricDesc, Selection, ViewKind, ViewTree};

/// HPCToolkit's own minimal database, shared with the project.
const SMALL: &str = "/work/shared/hpctoolkit-databases/small.d";

/// main > [call at a.c:5] > work (loop at a.c:10 > a.c:11, inlined helper called at a.c:12 >
/// h.h:3), and a partial path, sampled in two threads with two metrics.
fn sample_db() -> Database {
    let metrics = vec![
        MetricDesc::new("cpu-clock", "ns", Sampling::Frequency(1000)),
        MetricDesc::new("cycles", "events", Sampling::Period(100_000)),
    ];
    let mut db = Database::new(metrics);
    for tid in [7, 9] {
        db.threads.push(ThreadDesc {
            profile: 0,
            pid: 1,
            tid,
            comm: "t".into(),
        });
    }
    let mut files = FxHashMap::default();
    let (a, h) = (
        db.intern_file(&mut files, "/s/a.c"),
        db.intern_file(&mut files, "/s/h.h"),
    );
    let mut index = ChildIndex::default();
    let key = |kind, name: &str, file, line| NodeKey {
        file: Some(file),
        line: Some(line),
        ..NodeKey::pseudo(kind, name)
    };
    let main = db.child(
        &mut index,
        DbNodeId::ROOT,
        key(NodeKind::Procedure, "main", a, 1),
    );
    let call = db.child(&mut index, main, key(NodeKind::Statement, "", a, 5));
    let work = NodeKey {
        call_file: Some(a),
        call_line: Some(5),
        ..key(NodeKind::Procedure, "work", a, 9)
    };
    let work = db.child(&mut index, call, work);
    let lp = db.child(&mut index, work, key(NodeKind::Loop, "", a, 10));
    let body = db.child(&mut index, lp, key(NodeKind::Statement, "", a, 11));
    let helper = NodeKey {
        call_file: Some(a),
        call_line: Some(12),
        ..key(NodeKind::Inlined, "helper", h, 2)
    };
    let helper = db.child(&mut index, lp, helper);
    let inner = db.child(&mut index, helper, key(NodeKind::Statement, "", h, 3));
    let partial = NodeKey::pseudo(NodeKind::Partial, "<partial call paths>");
    let partial = db.child(&mut index, DbNodeId::ROOT, partial);
    let lost = db.child(&mut index, partial, key(NodeKind::Statement, "", a, 20));
    let cost = |samples, value| Cost { samples, value };
    for (node, t, c) in [
        (body, 0, 3),
        (inner, 0, 5),
        (inner, 1, 2),
        (call, 1, 1),
        (lost, 1, 4),
    ] {
        let costs = [cost(c, c * 1_000_000), cost(c, c * 100_000)];
        db.add_cost(node, ThreadIdx(t), &costs);
    }
    db.compute_totals();
    db
}

/// The bytes of `meta.db` and `profile.db` for `db`.
fn written(db: &Database) -> (Vec<u8>, Vec<u8>) {
    let ex = export::export(db);
    (meta_db(&ex), profile_db(&ex, &planes(&ex)))
}

/// JSON keeps the views' display order (by cost), whatever order the nodes were made in.
#[test]
fn a_database_written_and_read_back_gives_the_same_views() {
    let db = sample_db();
    let (meta, profile) = written(&db);
    let back = import::import(
        &read_bytes(&meta, &profile, None).unwrap(),
        Path::new("x.d"),
    );
    assert_eq!(back.metrics, db.metrics);
    let tids: Vec<u32> = back.threads.iter().map(|t| t.tid).collect();
    assert_eq!(tids, [7, 9]);
    for kind in [ViewKind::TopDown, ViewKind::Callers, ViewKind::Flat] {
        for selection in [Selection::All, Selection::Threads(vec![ThreadIdx(1)])] {
            let json = |db: &Database| {
                let mut out = Vec::new();
                json::render(&ViewTree::from_database(db, kind, &selection), &mut out).unwrap();
                String::from_utf8(out).unwrap()
            };
            assert_eq!(json(&back), json(&db), "{kind:?} {selection:?}");
        }
    }
}

#[test]
fn the_summary_profile_holds_inclusive_and_exclusive_sums() {
    let ex = export::export(&sample_db());
    let summary = &planes(&ex)[0];
    // The global context (ctxId 0): execution scope of metric 0 (id 2) is everything, in s.
    assert_eq!(summary[0].0, 0);
    assert_eq!(
        summary[0].1,
        vec![(2, 0.015), (5, 15.0), (8, 1_500_000.0), (11, 15.0)]
    );
    // "work" (exclusive, id 1): its loop and the inlined helper are not calls, but HPCToolkit
    // does not fold inlined code into the caller's exclusive cost: 3 ms of 13 ms inclusive.
    let work = ex.contexts.iter().position(|c| {
        c.function
            .is_some_and(|f| ex.functions[f].name.as_deref() == Some("work"))
    });
    let work = summary
        .iter()
        .find(|(id, _)| *id as usize == work.unwrap() + 1)
        .unwrap();
    let value = |id| work.1.iter().find(|v| v.0 == id).map(|v| v.1);
    assert_eq!(
        (value(1), value(2), value(0)),
        (Some(0.003), Some(0.010), None)
    );
}

#[test]
fn damaged_copies_of_hpctoolkits_database_give_errors_not_panics() {
    let meta = std::fs::read(Path::new(SMALL).join("meta.db")).unwrap();
    let profile = std::fs::read(Path::new(SMALL).join("profile.db")).unwrap();
    let good = read_bytes(&meta, &profile, None).unwrap();
    assert_eq!(good.contexts.len(), 13);
    for cut in 0..meta.len() {
        let err = read_bytes(&meta[..cut], &profile, None)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("meta.db: corrupt HPCToolkit database"),
            "{cut}: {err}"
        );
    }
    for cut in 0..profile.len() {
        let err = read_bytes(&meta, &profile[..cut], None)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("profile.db: corrupt"), "{cut}: {err}");
    }
    // Any byte changed: an error, or a database the views can show.
    for (file, bytes) in [(0, &meta), (1, &profile)] {
        for i in 0..bytes.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut bad = bytes.clone();
                bad[i] ^= flip;
                let (m, p) = if file == 0 {
                    (&bad, &profile)
                } else {
                    (&meta, &bad)
                };
                if let Ok(ex) = read_bytes(m, p, None) {
                    let db = import::import(&ex, Path::new("x.d"));
                    ViewTree::from_database(&db, ViewKind::TopDown, &Selection::All);
                }
            }
        }
    }
}

#[test]
fn a_context_tree_that_loops_is_refused() {
    let db = sample_db();
    let (mut meta, profile) = written(&db);
    // Make the first child of the main entry point its own parent: its children array is the
    // one it is in.
    let read =
        |meta: &[u8], at: u64| u64::from_le_bytes(meta[at as usize..][..8].try_into().unwrap());
    let entries = read(&meta, read(&meta, 0x48));
    let (size, array) = (read(&meta, entries), read(&meta, entries + 8));
    meta[array as usize..][..8].copy_from_slice(&size.to_le_bytes());
    meta[array as usize + 8..][..8].copy_from_slice(&array.to_le_bytes());
    let err = read_bytes(&meta, &profile, None).unwrap_err().to_string();
    assert!(
        err.starts_with("meta.db: corrupt") && err.contains("shared"),
        "{err}"
    );
}

/// A traced database: `trace.db` written and read back gives each thread's (time, node), in
/// time order, whatever order the samples were recorded in.
#[test]
fn traces_written_and_read_back_keep_times_and_contexts() {
    use profiler::trace::ThreadTrace;
    let mut db = sample_db();
    // Thread 1 at the inlined helper's statement (node 7), then at the lost one (node 9);
    // thread 0 at the loop body (node 5) with one step back in time.
    let mut t1 = ThreadTrace::new(1);
    t1.push(100, 7);
    t1.push(300, 9);
    let mut t0 = ThreadTrace::new(0);
    t0.push(250, 5);
    t0.push(200, 5);
    db.traces.threads = vec![t0, t1];
    let ex = export::export(&db);
    let (meta, profile) = (meta_db(&ex), profile_db(&ex, &planes(&ex)));
    let trace = trace_db(&ex).unwrap();
    let back = import::import(
        &read_bytes(&meta, &profile, Some(&trace)).unwrap(),
        Path::new("x.d"),
    );
    let lines: Vec<(u32, Vec<(u64, String)>)> = back
        .traces
        .threads
        .iter()
        .map(|t| {
            let samples = t.decode(back.nodes.len()).unwrap();
            let labels = samples
                .into_iter()
                .map(|(time, n)| (time, back.label(DbNodeId::from_index(n as usize))));
            (t.thread, labels.collect())
        })
        .collect();
    let at = |time, n: usize| (time, db.label(DbNodeId::from_index(n)));
    assert_eq!(
        lines,
        [
            (0, vec![at(200, 5), at(250, 5)]),
            (1, vec![at(100, 7), at(300, 9)])
        ]
    );
    assert_eq!(trace_db(&export::export(&sample_db())), None);
}

#[test]
fn damaged_copies_of_hpctoolkits_trace_give_errors_not_panics() {
    let read = |name: &str| std::fs::read(Path::new(SMALL).join(name)).unwrap();
    let (meta, profile, trace) = (read("meta.db"), read("profile.db"), read("trace.db"));
    let good = read_bytes(&meta, &profile, Some(&trace)).unwrap();
    let samples: usize = good.traces.iter().map(|t| t.samples.len()).sum();
    assert_eq!(samples, 13);
    for cut in 0..trace.len() {
        let err = read_bytes(&meta, &profile, Some(&trace[..cut])).unwrap_err();
        assert!(
            err.to_string().starts_with("trace.db: corrupt"),
            "{cut}: {err}"
        );
    }
    for i in 0..trace.len() {
        for flip in [0x01, 0x80, 0xff] {
            let mut bad = trace.clone();
            bad[i] ^= flip;
            if let Ok(ex) = read_bytes(&meta, &profile, Some(&bad)) {
                import::import(&ex, Path::new("x.d"));
            }
        }
    }
}
