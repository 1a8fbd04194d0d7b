//! Tests of the database format: round trips, older versions, refused malformations.

use super::*;

fn sample_db() -> Database {
    let metric = MetricDesc::new("cpu-clock", "ns", Sampling::Frequency(1000));
    let mut db = Database::new(vec![metric]);
    db.threads.push(ThreadDesc {
        profile: 0,
        pid: 1,
        tid: 1,
        comm: "a".into(),
    });
    let mut files = FxHashMap::default();
    let f = db.intern_file(&mut files, "/src/a.c");
    let mut index = ChildIndex::default();
    let key = NodeKey {
        kind: NodeKind::Statement,
        name: String::new(),
        module: None,
        file: Some(f),
        line: Some(7),
        end_line: None,
        call_file: None,
        call_line: None,
    };
    let s = db.child(&mut index, DbNodeId::ROOT, key.clone());
    assert_eq!(
        db.child(&mut index, DbNodeId::ROOT, key),
        s,
        "same key merges"
    );
    db.add_cost(
        s,
        ThreadIdx(0),
        &[Cost {
            samples: 2,
            value: 20,
        }],
    );
    db.compute_totals();
    db
}

#[test]
fn round_trip_and_labels() {
    let db = sample_db();
    let bytes = db.to_bytes().unwrap();
    let back = Database::from_bytes(&bytes, Path::new("x.hpcdb")).unwrap();
    assert_eq!(back, db);
    assert_eq!(
        back.metrics[0].total,
        Cost {
            samples: 2,
            value: 20
        }
    );
    assert_eq!(back.label(DbNodeId(1)), "a.c: 7");
}

#[test]
fn errors_name_the_file() {
    let db = sample_db();
    let mut bytes = db.to_bytes().unwrap();
    let p = Path::new("/tmp/some.hpcdb");
    let bad = Database::from_bytes(b"HPCRUNRS\x01\0\0\0", p).unwrap_err();
    assert!(bad.to_string().contains("/tmp/some.hpcdb: not a database"));
    let cut = Database::from_bytes(&bytes[..bytes.len() - 5], p).unwrap_err();
    assert!(cut.to_string().contains("truncated"), "{cut}");
    bytes[8] = 99;
    let ver = Database::from_bytes(&bytes, p).unwrap_err();
    assert!(ver.to_string().contains("version 99"), "{ver}");
}

#[test]
fn no_damaged_byte_of_a_database_is_accepted_and_version_1_still_reads() {
    let p = Path::new("x.hpcdb");
    let db = sample_db();
    let bytes = db.to_bytes().unwrap();
    for i in 0..bytes.len() {
        for flip in [0x01, 0x10, 0xff] {
            let mut bad = bytes.clone();
            bad[i] ^= flip;
            assert!(
                Database::from_bytes(&bad, p).is_err(),
                "byte {i} ^ {flip:#x}"
            );
        }
    }
    let mut v1 = b"HPCPROFD\x01\0\0\0".to_vec();
    v1.extend(postcard::to_stdvec(&db).unwrap());
    assert_eq!(Database::from_bytes(&v1, p).unwrap(), db);
}

#[test]
fn watch_parts_round_trip_and_version_5_reads_without() {
    use profiler::watchdb::{Binding, WatchMode};
    let p = Path::new("x.hpcdb");
    let mut db = sample_db();
    assert_eq!(
        Database::from_bytes(&db.to_version(5).unwrap(), p).unwrap(),
        db
    );
    db.profiles = vec!["p.db".into()];
    db.jobs = vec![JobPlace::default()];
    db.watch = vec![WatchProfile {
        mode: WatchMode::Variables(Vec::new()),
        functions: vec!["produce".into(), "consume".into()],
        bindings: vec![Binding {
            producer: 0,
            consumer: 1,
            stack: false,
            bytes: 8.0,
            bytes_error: 0.0,
            addresses: 8.0,
            seen_bytes: 8,
            seen_reads: 1,
        }],
        ..Default::default()
    }];
    let back = Database::from_bytes(&db.to_bytes().unwrap(), p).unwrap();
    assert_eq!(back.watch, db.watch);
    db.watch[0].bindings[0].producer = 7;
    let err = Database::from_bytes(&db.to_bytes().unwrap(), p).unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
    db.watch.push(WatchProfile::default());
    let err = Database::from_bytes(&db.to_bytes().unwrap(), p).unwrap_err();
    assert!(
        err.to_string().contains("2 watch parts for 1 profiles"),
        "{err}"
    );
}

#[test]
fn ranks_round_trip_and_version_3_reads_outside_a_job() {
    let p = Path::new("x.hpcdb");
    let mut db = sample_db();
    assert_eq!(
        Database::from_bytes(&db.to_version(3).unwrap(), p).unwrap(),
        db
    );
    db.profiles = vec!["a-000003.db".into()];
    db.jobs = vec![JobPlace {
        rank: Some(3),
        job: None,
    }];
    let back = Database::from_bytes(&db.to_bytes().unwrap(), p).unwrap();
    assert_eq!(back.jobs, db.jobs);
    db.jobs.clear();
    let err = Database::from_bytes(&db.to_bytes().unwrap(), p).unwrap_err();
    assert!(
        err.to_string().contains("0 job places for 1 profiles"),
        "{err}"
    );
}

#[test]
fn the_data_section_round_trips_and_a_dangling_access_is_refused() {
    use crate::db::data::{DataAccess, DataObject, DataObjectId, ObjectKind};
    let p = Path::new("x.hpcdb");
    let mut db = sample_db();
    db.data.objects.push(DataObject {
        kind: ObjectKind::Static,
        name: "A".into(),
        module: None,
        file: None,
        line: None,
        size: Some(64),
        start: Some(0x4000),
        site: None,
        receiver: None,
        layout: None,
    });
    db.data.accesses.push(DataAccess {
        object: DataObjectId(0),
        thread: ThreadIdx(0),
        node: DbNodeId(1),
        instruction: None,
        offset: Some(8),
        costs: vec![Cost {
            samples: 1,
            value: 10,
        }],
    });
    let back = Database::from_bytes(&db.to_bytes().unwrap(), p).unwrap();
    assert_eq!(back.data, db.data);
    // Data traces: kept, absent from version 6, refused where they name a missing access.
    let mut trace = profiler::trace::ThreadTrace::new(0);
    trace.push(10, 0);
    db.data.traces.threads.push(trace);
    let back = Database::from_bytes(&db.to_bytes().unwrap(), p).unwrap();
    assert_eq!(back.data.traces, db.data.traces);
    let v6 = Database::from_bytes(&db.to_version(6).unwrap(), p).unwrap();
    assert!(v6.data.traces.threads.is_empty());
    db.data.traces.threads[0].push(20, 1);
    let err = Database::from_bytes(&db.to_bytes().unwrap(), p).unwrap_err();
    assert!(err.to_string().contains("data trace"), "{err}");
    db.data.traces = Default::default();
    db.data.accesses[0].node = DbNodeId(7);
    let err = Database::from_bytes(&db.to_bytes().unwrap(), p).unwrap_err();
    assert!(err.to_string().contains("data access 0"), "{err}");
}

#[test]
fn traces_round_trip_and_one_of_a_missing_thread_or_node_is_refused() {
    use profiler::trace::ThreadTrace;
    let p = Path::new("x.hpcdb");
    let mut db = sample_db();
    let mut trace = ThreadTrace::new(0);
    trace.push(10, 1);
    db.traces.threads.push(trace);
    let back = Database::from_bytes(&db.to_bytes().unwrap(), p).unwrap();
    assert_eq!(back.traces.threads[0].decode(2).unwrap(), [(10, 1)]);
    db.traces.threads[0].push(20, 2);
    let err = Database::from_bytes(&db.to_bytes().unwrap(), p).unwrap_err();
    assert!(err.to_string().contains("context 2 of 2"), "{err}");
    db.traces.threads[0] = ThreadTrace::new(1);
    let err = Database::from_bytes(&db.to_bytes().unwrap(), p).unwrap_err();
    assert!(err.to_string().contains("missing thread 1"), "{err}");
}

#[test]
fn a_node_listed_twice_or_under_another_parent_is_refused() {
    let p = Path::new("x.hpcdb");
    let mut twice = sample_db();
    let child = twice.nodes[0].children[0];
    twice.nodes[0].children.push(child);
    let err = Database::from_bytes(&twice.to_bytes().unwrap(), p).unwrap_err();
    assert!(err.to_string().contains("node 0"), "{err}");
    let mut adopted = sample_db();
    let grandchild = adopted.child(
        &mut ChildIndex::default(),
        child,
        NodeKey::pseudo(NodeKind::Kernel, "<kernel>"),
    );
    adopted.nodes[0].children.push(grandchild);
    let err = Database::from_bytes(&adopted.to_bytes().unwrap(), p).unwrap_err();
    assert!(
        err.to_string().contains("corrupt hpcprof-rs database"),
        "{err}"
    );
}

/// A database of format version 7 (the last untagged one), written by the hpcprof-rs of commit
/// 7483711 from `profiler/tests/data/profile-v8.db` (page faults with data and traces).
const VERSION_7: &[u8] = include_bytes!("../../tests/data/database-v7.hpcdb");

#[test]
fn a_version_7_database_of_the_previous_hpcprof_rs_still_reads() {
    let p = Path::new("v7.hpcdb");
    assert_eq!(&VERSION_7[8..12], &7u32.to_le_bytes());
    let old = Database::from_bytes(VERSION_7, p).unwrap();
    assert_eq!(old.metrics[0].name, "page-faults");
    assert!(!old.data.accesses.is_empty() && !old.traces.threads.is_empty());
    assert!(!old.data.traces.threads.is_empty());
    // The untagged sections this build writes for old versions are that writer's bytes.
    assert_eq!(old.to_version(7).unwrap(), VERSION_7);
    let now = old.to_bytes().unwrap();
    assert_eq!(&now[8..12], &DATABASE_FILE.version.to_le_bytes());
    assert_eq!(Database::from_bytes(&now, p).unwrap(), old);
}

#[test]
fn unknown_database_sections_are_skipped_and_a_missing_database_named() {
    let p = Path::new("x.hpcdb");
    let db = sample_db();
    let encoded: Vec<Vec<u8>> = (1..=SECTIONS as u32)
        .map(|id| db.encode_section(id, Vec::new()).unwrap())
        .collect();
    let file = |ids: &[u32], extra: &[(u32, &[u8])]| {
        let mut list: Vec<(u32, &[u8])> = (ids.iter())
            .map(|&id| (id, encoded[id as usize - 1].as_slice()))
            .collect();
        list.extend_from_slice(extra);
        DATABASE_FILE
            .encode_parts(&[&sections::join(&list)])
            .unwrap()
    };
    // What a streamed write gives is the same file.
    let all: Vec<u32> = (1..=SECTIONS as u32).collect();
    assert_eq!(file(&all, &[]), db.to_bytes().unwrap());
    let newer = file(&all, &[(99, b"a newer hpcprof-rs")]);
    assert_eq!(Database::from_bytes(&newer, p).unwrap(), db);
    assert_eq!(Database::from_bytes(&file(&[1], &[]), p).unwrap(), db);
    let err = Database::from_bytes(&file(&[2, 3], &[]), p).unwrap_err();
    assert!(
        err.to_string()
            .contains("section 1 (the database) is missing"),
        "{err}"
    );
}

#[test]
fn instruction_costs_and_event_groups_round_trip_and_must_fit() {
    use crate::db::instructions::{InstructionCost, InstructionCosts};
    let mut db = sample_db();
    db.modules.push(ModuleDesc {
        path: "/app".into(),
        build_id: None,
        structure: StructureSource::OnTheFly,
    });
    let cost = vec![Cost {
        samples: 1,
        value: 10,
    }];
    db.instructions = InstructionCosts {
        entries: vec![InstructionCost {
            module: DbModuleId(0),
            address: 0x1234,
            costs: cost.clone(),
            kernel: cost,
        }],
    };
    db.read_with = vec![(0, 0)];
    let path = Path::new("x.hpcdb");
    let back = Database::from_bytes(&db.to_bytes().unwrap(), path).unwrap();
    assert_eq!(
        (&back.instructions, &back.read_with),
        (&db.instructions, &db.read_with)
    );
    let mut bad = db.clone();
    bad.read_with = vec![(1, 0)];
    assert!(Database::from_bytes(&bad.to_bytes().unwrap(), path).is_err());
    let mut bad = db;
    bad.instructions.entries[0].module = DbModuleId(1);
    assert!(Database::from_bytes(&bad.to_bytes().unwrap(), path).is_err());
}
