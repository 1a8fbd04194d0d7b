//! The machine's precise memory sampling units, read from sysfs the way `perf mem` reads them,
//! and the events `-e mem`, `-e mem-loads` and `-e mem-stores` open on them.
//!
//! Each unit samples individual memory operations with their data address, where the access
//! was served from (`PERF_SAMPLE_DATA_SRC`) and its latency (`PERF_SAMPLE_WEIGHT`):
//!
//! - **Intel PEBS**: the core PMU (`cpu`, or `cpu_core` and `cpu_atom` on hybrid parts, each
//!   on its own CPUs, listed in its `cpus` file) names the events `events/mem-loads` (e.g.
//!   `event=0xcd,umask=0x1,ldlat=3`) and `events/mem-stores`; the loads get perf's latency
//!   threshold `ldlat=30` (a field of `config1`). Where the PMU also has `events/mem-loads-aux`
//!   (Sapphire Rapids, the hybrid cores), the kernel samples loads only in a group led by it,
//!   as `perf mem` opens `{cpu/mem-loads-aux/,cpu/mem-loads,ldlat=30/}:P`. `precise_ip` starts at
//!   3 (perf's `:P`, the most precise) and is lowered while the kernel refuses it.
//! - **AMD IBS** (`ibs_op`): one op sampler per CPU that tags every sampled operation; perf
//!   opens `ibs_op//` (config 0) for loads and stores alike, and so do we. `mem-loads` and
//!   `mem-stores` keep the samples of their kind (by the data source's operation); `mem` keeps
//!   both. IBS ignores `precise_ip`.
//! - **Arm SPE** (`arm_spe_0`): configured from its `format/` fields (`ts_enable=1`,
//!   `load_filter`, `store_filter`, `min_latency=30` for loads); its records are written to the
//!   AUX area of the ring, not as samples, and this version of hpcrun-rs does not decode them:
//!   the attributes are built (and tested), the run is refused with that reason.
//!
//! Event strings (`name=value,...`, a bare `name` meaning 1) are encoded through the PMU's
//! `format/NAME` files (`config:0-7`, `config1:0-15`, `config:0-7,32-35`: the value's bits
//! fill the listed bit ranges in order), exactly as perf does. Every reader here takes the
//! event-source directory as a parameter, so the tests feed fake sysfs trees.
//!
//! What could not be verified on this project's VM (it has no PMU): that a kernel accepts these
//! attributes, and the samples real hardware delivers. The attributes are checked field by field
//! against perf's encodings of the same sysfs contents; the sample decoding against records
//! built from the kernel's documented layout (`sample`).

use std::path::Path;
use std::sync::OnceLock;

/// Where the kernel lists the machine's event sources (PMUs).
pub const EVENT_SOURCES: &str = "/sys/bus/event_source/devices";

/// perf's default load-latency threshold (cycles) for `mem-loads` (`perf mem record -l`).
pub const DEFAULT_LDLAT: u64 = 30;

/// Which memory operations an event samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemOp {
    /// Loads (`mem-loads`).
    Loads,
    /// Stores (`mem-stores`).
    Stores,
    /// Both (`mem`, where one event samples both).
    Both,
}

/// The mechanism of a machine's precise memory sampling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitKind {
    /// Intel's Precise Event-Based Sampling on the core PMU(s).
    Pebs,
    /// AMD's Instruction-Based Sampling, op sampler.
    Ibs,
    /// Arm's Statistical Profiling Extension.
    Spe,
}

/// One event of one PMU, encoded: what `perf_event_attr` gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmuEvent {
    /// The PMU's sysfs name (`cpu_core`, `ibs_op`...).
    pub pmu: String,
    /// `perf_event_attr.type`: the PMU's `type` file.
    pub type_: u32,
    /// `config`, `config1`, `config2`.
    pub config: [u64; 3],
}

/// How one precise memory event is opened on one PMU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreciseEvent {
    /// The sampling event.
    pub event: PmuEvent,
    /// The group leader it must be opened under (Intel's `mem-loads-aux`), counting only.
    pub leader: Option<PmuEvent>,
    /// The CPUs its PMU covers (hybrid parts); `None`: every CPU.
    pub cpus: Option<Vec<i32>>,
    /// The `precise_ip` asked for first.
    pub precise_ip: u8,
    /// The operations whose samples are kept, by the data source's operation: IBS samples
    /// every operation, so `mem-loads` there keeps the loads.
    pub keep: MemOp,
}

/// The machine's precise memory sampling: its kind and the PMUs found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreciseUnits {
    /// The mechanism.
    pub kind: UnitKind,
    /// The PMUs' sysfs names.
    pub pmus: Vec<String>,
    /// Per [`MemOp`] (loads, stores, both), the events to open, or why there are none.
    events: [Result<Vec<PreciseEvent>, String>; 3],
}

impl PreciseUnits {
    /// The units under `root` (an event-source directory such as [`EVENT_SOURCES`]): Intel's
    /// core PMUs with `events/mem-loads`, else `ibs_op`, else the first `arm_spe_*`; `None`
    /// where there are none.
    pub fn detect(root: &Path) -> Option<PreciseUnits> {
        let mut names: Vec<String> = std::fs::read_dir(root)
            .ok()?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        names.sort();
        let intel: Vec<&String> = names
            .iter()
            .filter(|n| *n == "cpu" || n.starts_with("cpu_"))
            .filter(|n| root.join(n).join("events/mem-loads").exists())
            .collect();
        if !intel.is_empty() {
            return Some(pebs(root, &intel));
        }
        if names.iter().any(|n| n == "ibs_op") {
            return Some(ibs(root));
        }
        let spe = names.iter().find(|n| n.starts_with("arm_spe"))?;
        Some(spe_unit(root, spe))
    }

    /// The operations `-e mem` samples here: loads and stores as two events (PEBS), or one
    /// event for both (IBS, SPE).
    pub fn mem_ops(&self) -> &'static [MemOp] {
        match self.kind {
            UnitKind::Pebs => &[MemOp::Loads, MemOp::Stores],
            UnitKind::Ibs | UnitKind::Spe => &[MemOp::Both],
        }
    }

    /// The events that sample `op`, one per PMU, or why this machine cannot.
    pub fn events(&self, op: MemOp) -> Result<&[PreciseEvent], String> {
        let i = match op {
            MemOp::Loads => 0,
            MemOp::Stores => 1,
            MemOp::Both => 2,
        };
        self.events[i].as_deref().map_err(Clone::clone)
    }

    /// Whether the samples come as `PERF_RECORD_SAMPLE` records (not Arm SPE's AUX area).
    pub fn delivers_samples(&self) -> bool {
        self.kind != UnitKind::Spe
    }
}

/// The units of this machine, read once.
pub fn machine() -> Option<&'static PreciseUnits> {
    static UNITS: OnceLock<Option<PreciseUnits>> = OnceLock::new();
    UNITS
        .get_or_init(|| PreciseUnits::detect(Path::new(EVENT_SOURCES)))
        .as_ref()
}

fn pebs(root: &Path, pmus: &[&String]) -> PreciseUnits {
    let per_pmu = |name: &str, ldlat: Option<u64>| -> Result<Vec<PreciseEvent>, String> {
        let mut out = Vec::new();
        for pmu in pmus {
            let dir = root.join(pmu);
            if !dir.join("events").join(name).exists() {
                continue;
            }
            let mut terms = event_terms(&dir, name)?;
            if let Some(ldlat) = ldlat.filter(|_| dir.join("format/ldlat").exists()) {
                terms.push(("ldlat".into(), ldlat));
            }
            let leader = match ldlat.is_some() && dir.join("events/mem-loads-aux").exists() {
                true => Some(encode_event(
                    &dir,
                    pmu,
                    &event_terms(&dir, "mem-loads-aux")?,
                )?),
                false => None,
            };
            out.push(PreciseEvent {
                event: encode_event(&dir, pmu, &terms)?,
                leader,
                cpus: read(&dir.join("cpus")).map(|c| parse_cpu_list(&c)),
                precise_ip: 3,
                // Each event samples its operations only.
                keep: MemOp::Both,
            });
        }
        match out.is_empty() {
            true => Err(format!("no {name} event in {}", pmus_text(pmus))),
            false => Ok(out),
        }
    };
    PreciseUnits {
        kind: UnitKind::Pebs,
        pmus: pmus.iter().map(|p| p.to_string()).collect(),
        events: [
            per_pmu("mem-loads", Some(DEFAULT_LDLAT)),
            per_pmu("mem-stores", None),
            Err("PEBS samples loads and stores with two events: -e mem opens both".into()),
        ],
    }
}

fn pmus_text(pmus: &[&String]) -> String {
    pmus.iter()
        .map(|p| p.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn ibs(root: &Path) -> PreciseUnits {
    let dir = root.join("ibs_op");
    let event = |keep| -> Result<Vec<PreciseEvent>, String> {
        Ok(vec![PreciseEvent {
            event: encode_event(&dir, "ibs_op", &[])?,
            leader: None,
            cpus: None,
            precise_ip: 0,
            keep,
        }])
    };
    PreciseUnits {
        kind: UnitKind::Ibs,
        pmus: vec!["ibs_op".into()],
        events: [
            event(MemOp::Loads),
            event(MemOp::Stores),
            event(MemOp::Both),
        ],
    }
}

fn spe_unit(root: &Path, name: &str) -> PreciseUnits {
    let dir = root.join(name);
    let event = |loads: u64, stores: u64, keep| -> Result<Vec<PreciseEvent>, String> {
        let mut terms = vec![
            ("ts_enable".to_string(), 1),
            ("load_filter".to_string(), loads),
            ("store_filter".to_string(), stores),
        ];
        if loads == 1 && dir.join("format/min_latency").exists() {
            terms.push(("min_latency".into(), DEFAULT_LDLAT));
        }
        Ok(vec![PreciseEvent {
            event: encode_event(&dir, name, &terms)?,
            leader: None,
            cpus: read(&dir.join("cpus")).map(|c| parse_cpu_list(&c)),
            precise_ip: 0,
            keep,
        }])
    };
    PreciseUnits {
        kind: UnitKind::Spe,
        pmus: vec![name.to_string()],
        events: [
            event(1, 0, MemOp::Loads),
            event(0, 1, MemOp::Stores),
            event(1, 1, MemOp::Both),
        ],
    }
}

/// A sysfs file's text, trimmed; `None` when it cannot be read.
fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|t| t.trim().to_string())
}

/// The terms of the PMU's event `name` (`dir/events/name`).
fn event_terms(dir: &Path, name: &str) -> Result<Vec<(String, u64)>, String> {
    let path = dir.join("events").join(name);
    let text = read(&path).ok_or_else(|| format!("cannot read {}", path.display()))?;
    parse_terms(&text).ok_or_else(|| format!("{}: cannot parse '{text}'", path.display()))
}

/// `name=value,...` terms, a bare `name` meaning 1; values decimal or `0x` hex.
pub fn parse_terms(text: &str) -> Option<Vec<(String, u64)>> {
    text.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|term| match term.split_once('=') {
            None => Some((term.to_string(), 1)),
            Some((name, value)) => Some((name.trim().to_string(), parse_number(value.trim())?)),
        })
        .collect()
}

fn parse_number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// A `format/NAME` file: which of `config`, `config1`, `config2` it is in, and its bit ranges
/// in order (`config1:0-15`, `config:0-7,32-35`, `config:23`).
pub fn parse_format(text: &str) -> Option<(usize, Vec<(u32, u32)>)> {
    let (word, bits) = text.trim().split_once(':')?;
    let word = match word {
        "config" => 0,
        "config1" => 1,
        "config2" => 2,
        _ => return None,
    };
    let ranges = bits
        .split(',')
        .map(|r| {
            let (lo, hi) = r.split_once('-').unwrap_or((r, r));
            let (lo, hi) = (lo.trim().parse().ok()?, hi.trim().parse().ok()?);
            (lo <= hi && hi < 64).then_some((lo, hi))
        })
        .collect::<Option<Vec<_>>>()?;
    Some((word, ranges))
}

/// Encode `terms` through the PMU's formats (later terms override earlier ones of the same
/// name), with its type: the attribute fields of event `pmu` in `dir`.
fn encode_event(dir: &Path, pmu: &str, terms: &[(String, u64)]) -> Result<PmuEvent, String> {
    let type_path = dir.join("type");
    let type_ = read(&type_path)
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| format!("cannot read {}", type_path.display()))?;
    let mut config = [0u64; 3];
    let mut last: Vec<(&str, u64)> = Vec::new();
    for (name, value) in terms {
        last.retain(|(n, _)| n != name);
        last.push((name, *value));
    }
    for (name, value) in last {
        let path = dir.join("format").join(name);
        let text = read(&path).ok_or_else(|| format!("{pmu} has no format for '{name}'"))?;
        let (word, ranges) = parse_format(&text)
            .ok_or_else(|| format!("{}: cannot parse '{text}'", path.display()))?;
        config[word] = place_bits(config[word], &ranges, value)
            .ok_or_else(|| format!("{value:#x} does not fit {pmu}'s field '{name}' ({text})"))?;
    }
    Ok(PmuEvent {
        pmu: pmu.to_string(),
        type_,
        config,
    })
}

/// `word` with `value`'s bits, lowest first, written into the bit `ranges` in order (and
/// those bits cleared first); `None` when `value` has more bits than the ranges hold.
fn place_bits(mut word: u64, ranges: &[(u32, u32)], mut value: u64) -> Option<u64> {
    for &(lo, hi) in ranges {
        for bit in lo..=hi {
            word = (word & !(1 << bit)) | ((value & 1) << bit);
            value >>= 1;
        }
    }
    (value == 0).then_some(word)
}

/// A kernel CPU list (`0-3,6`, the `cpus` files of hybrid PMUs and `cpu/online`).
pub fn parse_cpu_list(text: &str) -> Vec<i32> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(lo), Ok(hi)) = (lo.trim().parse::<i32>(), hi.trim().parse::<i32>()) {
            cpus.extend(lo..=hi);
        }
    }
    cpus
}

#[cfg(test)]
pub(crate) mod tests {
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
}
