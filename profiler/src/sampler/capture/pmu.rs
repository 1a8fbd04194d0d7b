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
#[path = "pmu_tests.rs"]
pub(crate) mod tests;
