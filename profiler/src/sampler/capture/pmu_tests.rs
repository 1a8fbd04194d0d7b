//! Tests of the precise memory units: fake sysfs trees, read and encoded as perf does.

use super::*;
use std::path::PathBuf;

/// A fake PMU directory: `type`, `format/*`, `events/*`, optional `cpus`.
pub(crate) fn pmu(
    root: &Path,
    name: &str,
    type_: u32,
    formats: &[(&str, &str)],
    events: &[(&str, &str)],
    cpus: Option<&str>,
) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("format")).unwrap();
    std::fs::create_dir_all(dir.join("events")).unwrap();
    std::fs::write(dir.join("type"), format!("{type_}\n")).unwrap();
    for (f, text) in formats {
        std::fs::write(dir.join("format").join(f), format!("{text}\n")).unwrap();
    }
    for (e, text) in events {
        std::fs::write(dir.join("events").join(e), format!("{text}\n")).unwrap();
    }
    if let Some(c) = cpus {
        std::fs::write(dir.join("cpus"), format!("{c}\n")).unwrap();
    }
    dir
}

/// Intel's core PMU formats, as Skylake to Sapphire Rapids list them.
pub(crate) const INTEL_FORMATS: [(&str, &str); 8] = [
    ("event", "config:0-7"),
    ("umask", "config:8-15"),
    ("edge", "config:18"),
    ("pc", "config:19"),
    ("any", "config:21"),
    ("inv", "config:23"),
    ("cmask", "config:24-31"),
    ("ldlat", "config1:0-15"),
];

/// The event-source directory of a machine of each kind, built under `root`.
pub(crate) fn intel(root: &Path) {
    pmu(root, "software", 1, &[], &[], None);
    pmu(
        root,
        "cpu",
        4,
        &INTEL_FORMATS,
        &[
            ("mem-loads", "event=0xcd,umask=0x1,ldlat=3"),
            ("mem-stores", "event=0xd0,umask=0x82"),
        ],
        None,
    );
}

pub(crate) fn hybrid(root: &Path) {
    pmu(
        root,
        "cpu_core",
        4,
        &INTEL_FORMATS,
        &[
            ("mem-loads", "event=0xcd,umask=0x1,ldlat=3"),
            ("mem-loads-aux", "event=0x03,umask=0x82"),
            ("mem-stores", "event=0xcd,umask=0x2"),
        ],
        Some("0-15"),
    );
    pmu(
        root,
        "cpu_atom",
        10,
        &INTEL_FORMATS,
        &[
            ("mem-loads", "event=0xd0,umask=0x5,ldlat=3"),
            ("mem-stores", "event=0xd0,umask=0x6"),
        ],
        Some("16-23"),
    );
}

pub(crate) fn amd(root: &Path) {
    pmu(
        root,
        "ibs_op",
        11,
        &[("cnt_ctl", "config:19"), ("l3missonly", "config:16")],
        &[],
        None,
    );
    pmu(
        root,
        "ibs_fetch",
        10,
        &[("rand_en", "config:57")],
        &[],
        None,
    );
    pmu(root, "cpu", 4, &[("event", "config:0-7,32-35")], &[], None);
}

pub(crate) fn arm(root: &Path) {
    pmu(
        root,
        "arm_spe_0",
        9,
        &[
            ("ts_enable", "config:0"),
            ("pa_enable", "config:1"),
            ("pct_enable", "config:2"),
            ("jitter", "config:16"),
            ("branch_filter", "config:32"),
            ("load_filter", "config:33"),
            ("store_filter", "config:34"),
            ("event_filter", "config1:0-63"),
            ("min_latency", "config2:0-11"),
        ],
        &[],
        Some("0-7"),
    );
}

#[test]
fn formats_terms_and_cpu_lists_parse_as_perf_reads_them() {
    assert_eq!(parse_format("config:0-7"), Some((0, vec![(0, 7)])));
    assert_eq!(parse_format("config1:0-15\n"), Some((1, vec![(0, 15)])));
    assert_eq!(parse_format("config:23"), Some((0, vec![(23, 23)])));
    assert_eq!(
        parse_format("config:0-7,32-35"),
        Some((0, vec![(0, 7), (32, 35)]))
    );
    assert_eq!(parse_format("config3:0-7"), None);
    assert_eq!(parse_format("config:9-2"), None);
    assert_eq!(parse_format("config:60-64"), None);
    assert_eq!(
        parse_terms("event=0xcd,umask=0x1,ldlat=3"),
        Some(vec![
            ("event".into(), 0xcd),
            ("umask".into(), 1),
            ("ldlat".into(), 3)
        ])
    );
    assert_eq!(
        parse_terms("ts_enable,jitter=0"),
        Some(vec![("ts_enable".into(), 1), ("jitter".into(), 0)])
    );
    assert_eq!(parse_terms("event=zz"), None);
    // A 12-bit AMD event number spread over two ranges.
    assert_eq!(
        place_bits(0, &[(0, 7), (32, 35)], 0x1ab),
        Some(0x1_0000_00ab)
    );
    assert_eq!(place_bits(0, &[(0, 3)], 0x10), None, "too wide");
    assert_eq!(parse_cpu_list("0-3,6\n"), vec![0, 1, 2, 3, 6]);
    assert_eq!(parse_cpu_list(""), Vec::<i32>::new());
}

#[test]
fn intel_loads_get_ldlat_30_in_config1_and_stores_none() {
    let dir = tempfile::tempdir().unwrap();
    intel(dir.path());
    let units = PreciseUnits::detect(dir.path()).unwrap();
    assert_eq!(
        (units.kind, units.pmus.clone()),
        (UnitKind::Pebs, vec!["cpu".to_string()])
    );
    assert_eq!(units.mem_ops(), &[MemOp::Loads, MemOp::Stores]);
    let loads = units.events(MemOp::Loads).unwrap();
    assert_eq!(
        loads,
        &[PreciseEvent {
            event: PmuEvent {
                pmu: "cpu".into(),
                type_: 4,
                config: [0x1cd, 30, 0],
            },
            leader: None,
            cpus: None,
            precise_ip: 3,
            keep: MemOp::Both,
        }]
    );
    let stores = units.events(MemOp::Stores).unwrap();
    assert_eq!(stores[0].event.config, [0x82d0, 0, 0]);
    assert!(units.events(MemOp::Both).is_err());
    assert!(units.delivers_samples());
}

#[test]
fn hybrid_intel_opens_one_event_per_core_type_on_its_cpus_loads_under_the_aux_leader() {
    let dir = tempfile::tempdir().unwrap();
    hybrid(dir.path());
    let units = PreciseUnits::detect(dir.path()).unwrap();
    assert_eq!(units.pmus, ["cpu_atom", "cpu_core"]);
    let loads = units.events(MemOp::Loads).unwrap();
    assert_eq!(loads.len(), 2);
    let (atom, core) = (&loads[0], &loads[1]);
    assert_eq!((atom.event.type_, atom.event.config), (10, [0x5d0, 30, 0]));
    assert_eq!(atom.leader, None);
    assert_eq!(atom.cpus, Some((16..=23).collect()));
    assert_eq!((core.event.type_, core.event.config), (4, [0x1cd, 30, 0]));
    let leader = core.leader.as_ref().unwrap();
    assert_eq!((leader.type_, leader.config), (4, [0x8203, 0, 0]));
    assert_eq!(core.cpus, Some((0..=15).collect()));
    let stores = units.events(MemOp::Stores).unwrap();
    assert_eq!(stores[1].event.config, [0x2cd, 0, 0]);
    assert_eq!(stores[1].leader, None, "stores need no leader");
}

#[test]
fn amd_opens_ibs_op_for_loads_and_stores_alike() {
    let dir = tempfile::tempdir().unwrap();
    amd(dir.path());
    let units = PreciseUnits::detect(dir.path()).unwrap();
    assert_eq!(units.kind, UnitKind::Ibs);
    assert_eq!(units.mem_ops(), &[MemOp::Both]);
    for (op, keep) in [
        (MemOp::Loads, MemOp::Loads),
        (MemOp::Stores, MemOp::Stores),
        (MemOp::Both, MemOp::Both),
    ] {
        let e = &units.events(op).unwrap()[0];
        assert_eq!((e.event.type_, e.event.config), (11, [0, 0, 0]));
        assert_eq!((e.precise_ip, e.keep, e.cpus.clone()), (0, keep, None));
    }
}

#[test]
fn arm_spe_is_configured_from_its_format_fields_but_delivers_no_samples() {
    let dir = tempfile::tempdir().unwrap();
    arm(dir.path());
    let units = PreciseUnits::detect(dir.path()).unwrap();
    assert_eq!(
        (units.kind, units.pmus.clone()),
        (UnitKind::Spe, vec!["arm_spe_0".into()])
    );
    let loads = &units.events(MemOp::Loads).unwrap()[0];
    assert_eq!(loads.event.type_, 9);
    assert_eq!(loads.event.config, [1 | 1 << 33, 0, 30]);
    assert_eq!(loads.cpus, Some((0..=7).collect()));
    let stores = &units.events(MemOp::Stores).unwrap()[0];
    assert_eq!(stores.event.config, [1 | 1 << 34, 0, 0]);
    let both = &units.events(MemOp::Both).unwrap()[0];
    assert_eq!(both.event.config, [1 | 1 << 33 | 1 << 34, 0, 30]);
    assert!(!units.delivers_samples());
}

#[test]
fn machines_without_a_unit_have_none() {
    let dir = tempfile::tempdir().unwrap();
    pmu(dir.path(), "software", 1, &[], &[], None);
    pmu(
        dir.path(),
        "cpu",
        4,
        &INTEL_FORMATS,
        &[("cycles", "event=0x3c")],
        None,
    );
    assert_eq!(PreciseUnits::detect(dir.path()), None);
    assert_eq!(PreciseUnits::detect(&dir.path().join("missing")), None);
}

#[test]
fn a_field_the_pmu_does_not_have_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    pmu(
        dir.path(),
        "cpu",
        4,
        &INTEL_FORMATS[..2],
        &[("mem-loads", "event=0xcd,umask=0x1,frontend=0x7")],
        None,
    );
    let units = PreciseUnits::detect(dir.path()).unwrap();
    let err = units.events(MemOp::Loads).unwrap_err();
    assert!(err.contains("no format for 'frontend'"), "{err}");
}
