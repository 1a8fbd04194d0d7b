//! Event names, their kernel encodings and units, and the `-e NAME[@PERIOD|@fFREQ]` syntax.

use perf_event_open_sys::bindings as sys;

use crate::format::db::{EventDesc, Sampling};
use crate::sampler::capture::pmu::{MemOp, PreciseUnits, UnitKind};

/// The default sampling rate when `-e` gives none: about 1000 samples per second.
pub const DEFAULT_FREQUENCY: u64 = 1000;

/// Whether an event is counted by the CPU's performance monitoring unit or by the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventClass {
    /// Needs a hardware PMU (absent in most VMs).
    Hardware,
    /// Counted by the kernel; always available.
    Software,
    /// Precise memory sampling (PEBS, IBS, SPE: see [`crate::sampler::capture::pmu`]): each sample is one memory
    /// operation with its data address, data source and latency.
    Memory(MemOp),
}

/// A named event this profiler knows how to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownEvent {
    /// The name users type, as `perf` spells it.
    pub name: &'static str,
    /// Hardware or software.
    pub class: EventClass,
    /// `perf_event_attr.config` within the class's type.
    pub config: u64,
    /// Unit of the summed periods.
    pub unit: &'static str,
    /// What one sample costs the measured program, for `-L`.
    pub cost: &'static str,
}

const HW_COST: &str = "PMU overflow interrupt per sample; counting itself is free";
const CLOCK_COST: &str = "timer interrupt per sample; always available";
const SW_COST: &str = "counted in the kernel path that raises it; cheap unless very frequent";
const MEM_COST: &str = "a record the CPU writes (PEBS, IBS) and the kernel copies, per sample";
const OFF_CPU_COST: &str =
    "a sample with its stack at every switch away from the CPU; needs kernel sampling";

/// Every event `-e` accepts.
pub const KNOWN_EVENTS: &[KnownEvent] = &[
    hw("cycles", sys::PERF_COUNT_HW_CPU_CYCLES, "cycles"),
    hw(
        "instructions",
        sys::PERF_COUNT_HW_INSTRUCTIONS,
        "instructions",
    ),
    hw(
        "cache-references",
        sys::PERF_COUNT_HW_CACHE_REFERENCES,
        "events",
    ),
    hw("cache-misses", sys::PERF_COUNT_HW_CACHE_MISSES, "events"),
    hw(
        "branch-instructions",
        sys::PERF_COUNT_HW_BRANCH_INSTRUCTIONS,
        "events",
    ),
    hw("branch-misses", sys::PERF_COUNT_HW_BRANCH_MISSES, "events"),
    hw("ref-cycles", sys::PERF_COUNT_HW_REF_CPU_CYCLES, "cycles"),
    sw("cpu-clock", sys::PERF_COUNT_SW_CPU_CLOCK, "ns", CLOCK_COST),
    sw(
        "task-clock",
        sys::PERF_COUNT_SW_TASK_CLOCK,
        "ns",
        CLOCK_COST,
    ),
    sw(
        "page-faults",
        sys::PERF_COUNT_SW_PAGE_FAULTS,
        "events",
        SW_COST,
    ),
    sw(
        "minor-faults",
        sys::PERF_COUNT_SW_PAGE_FAULTS_MIN,
        "events",
        SW_COST,
    ),
    sw(
        "major-faults",
        sys::PERF_COUNT_SW_PAGE_FAULTS_MAJ,
        "events",
        SW_COST,
    ),
    sw(
        "context-switches",
        sys::PERF_COUNT_SW_CONTEXT_SWITCHES,
        "events",
        SW_COST,
    ),
    sw(
        OFF_CPU,
        sys::PERF_COUNT_SW_CONTEXT_SWITCHES,
        "ns",
        OFF_CPU_COST,
    ),
    sw(
        "cpu-migrations",
        sys::PERF_COUNT_SW_CPU_MIGRATIONS,
        "events",
        SW_COST,
    ),
    mem("mem-loads", MemOp::Loads),
    mem("mem-stores", MemOp::Stores),
    mem("mem", MemOp::Both),
];

const fn mem(name: &'static str, op: MemOp) -> KnownEvent {
    KnownEvent {
        name,
        class: EventClass::Memory(op),
        config: 0,
        unit: "events",
        cost: MEM_COST,
    }
}

const fn hw(name: &'static str, config: u32, unit: &'static str) -> KnownEvent {
    KnownEvent {
        name,
        class: EventClass::Hardware,
        config: config as u64,
        unit,
        cost: HW_COST,
    }
}

const fn sw(name: &'static str, config: u32, unit: &'static str, cost: &'static str) -> KnownEvent {
    KnownEvent {
        name,
        class: EventClass::Software,
        config: config as u64,
        unit,
        cost,
    }
}

/// Where a sample of an event gets its data address from under `--data`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataSource {
    /// The kernel reports the faulting address itself (`PERF_SAMPLE_ADDR`: page faults).
    Address,
    /// The sampled registers, through the memory operand of the interrupted instruction
    /// (effective-address recovery: clocks and PMU counters).
    Registers,
    /// The PMU reports the address of the sampled memory operation (`PERF_SAMPLE_ADDR`), with
    /// where it was served from and its latency: precise memory events.
    Precise,
    /// The event has no data address (context switches, migrations).
    None,
}

impl KnownEvent {
    /// Where this event's samples get a data address from (see [`DataSource`]).
    pub fn data_source(&self) -> DataSource {
        let faults = [
            sys::PERF_COUNT_SW_PAGE_FAULTS,
            sys::PERF_COUNT_SW_PAGE_FAULTS_MIN,
            sys::PERF_COUNT_SW_PAGE_FAULTS_MAJ,
        ];
        let clocks = [sys::PERF_COUNT_SW_CPU_CLOCK, sys::PERF_COUNT_SW_TASK_CLOCK];
        match self.class {
            EventClass::Software if faults.iter().any(|&c| c as u64 == self.config) => {
                DataSource::Address
            }
            EventClass::Software if clocks.iter().any(|&c| c as u64 == self.config) => {
                DataSource::Registers
            }
            EventClass::Software => DataSource::None,
            EventClass::Hardware => DataSource::Registers,
            EventClass::Memory(_) => DataSource::Precise,
        }
    }
}

/// The event of off-CPU time (`--off-cpu`): every switch of a thread away from the CPU is a
/// sample, with the calling context it blocked in, weighed by the time until the thread runs
/// again (the kernel's switch records say when).
pub const OFF_CPU: &str = crate::format::db::OFF_CPU_EVENT;

impl KnownEvent {
    /// Whether this is [`OFF_CPU`], whose samples weigh the time a thread spent off the CPU.
    pub fn is_off_cpu(&self) -> bool {
        self.name == OFF_CPU
    }
}

/// The software clock that replaces `cycles` where the machine has no PMU.
pub const FALLBACK_CLOCK: &str = "cpu-clock";

/// Look up an event by name (`cpu-cycles` is accepted for `cycles`).
pub fn find(name: &str) -> Option<&'static KnownEvent> {
    let name = match name {
        "cpu-cycles" => "cycles",
        "faults" => "page-faults",
        "cs" => "context-switches",
        other => other,
    };
    KNOWN_EVENTS.iter().find(|e| e.name == name)
}

/// The names of precise memory sampling (loads and stores with their data addresses).
pub const PRECISE_MEMORY_EVENTS: [&str; 3] = ["mem", "mem-loads", "mem-stores"];

/// Why `-e NAME` (a precise memory event) cannot be sampled with the machine's `units`: none
/// here, a unit whose records this build does not decode, or `why` the unit cannot sample it;
/// either way, what gives data addresses instead.
fn precise_memory_refusal(name: &str, units: Option<&PreciseUnits>, why: Option<&str>) -> String {
    let instead = "data addresses are available from -e page-faults --data (exact, first touch) \
                   and -e cpu-clock --data (from the interrupted instruction)";
    let sources = crate::sampler::capture::pmu::EVENT_SOURCES;
    match (units, why) {
        (None, _) => format!("no precise memory sampling on this machine for '{name}' (no PEBS, IBS or SPE unit in {sources}); {instead}"),
        (Some(u), _) if !u.delivers_samples() => format!(
            "'{name}' would use {} here, whose records arrive in the ring's AUX area, which this \
             version of hpcrun-rs does not decode; {instead}",
            u.pmus.join(", ")
        ),
        (Some(u), Some(why)) => format!("'{name}' cannot be sampled with {} here ({why}); {instead}", u.pmus.join(", ")),
        (Some(u), None) => format!("'{name}' cannot be sampled with {} here; {instead}", u.pmus.join(", ")),
    }
}

/// An event as requested on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventSpec {
    /// The event.
    pub event: &'static KnownEvent,
    /// How to sample it.
    pub sampling: Sampling,
    /// Its place in an event group (`-e '{LEADER,MEMBER,...}'`, see
    /// [`crate::sampler::capture::groups`]).
    pub grouping: Grouping,
}

/// Where an event stands in an event group: the leader samples, and each of its samples reads
/// the members' counts, so that their ratios per context come from the same instants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Grouping {
    /// Sampled on its own.
    #[default]
    Alone,
    /// Sampled, its samples carrying the counts of the members that follow it.
    Leader,
    /// Counted, not sampled: what it counted since the leader's previous sample in the same
    /// thread goes to the context of each leader sample.
    Member,
}

/// Why an `-e` argument was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The name is not one of [`KNOWN_EVENTS`].
    #[error("unknown event '{0}' (run `hpcrun-rs -L` to list the events this machine supports)")]
    Unknown(String),
    /// Precise memory sampling (`mem`, `mem-loads`, `mem-stores`) was asked for.
    #[error("{0}")]
    PreciseMemory(String),
    /// The part after `@` is not a positive number or `f` + a positive number.
    #[error("bad sampling rate '{rate}' for event '{name}': write NAME@PERIOD or NAME@fFREQUENCY, e.g. cycles@f1000")]
    BadRate {
        /// The event name.
        name: String,
        /// The rate text.
        rate: String,
    },
    /// An event group (`{LEADER,MEMBER,...}`) that cannot be: its syntax, or an event that
    /// cannot be in one.
    #[error("{0}")]
    Group(String),
    /// A rate was given for `off-cpu`, which samples every switch.
    #[error("'off-cpu' samples every switch away from the CPU: it takes no @rate")]
    OffCpuRate,
}

impl EventSpec {
    /// Parse `NAME`, `NAME@PERIOD` or `NAME@fFREQ` naming one event (see
    /// [`EventSpec::parse_all`] for `mem`, which may name two).
    pub fn parse(text: &str) -> Result<EventSpec, SpecError> {
        let mut specs = Self::parse_all(text)?;
        match specs.len() {
            1 => Ok(specs.remove(0)),
            _ => Err(SpecError::PreciseMemory(format!(
                "'{text}' names {} events here",
                specs.len()
            ))),
        }
    }

    /// Parse `NAME`, `NAME@PERIOD` or `NAME@fFREQ`: the events it names on this machine (`mem`
    /// is loads and stores, two events on Intel's PEBS; see [`crate::sampler::capture::pmu`]).
    pub fn parse_all(text: &str) -> Result<Vec<EventSpec>, SpecError> {
        Self::parse_with(text, crate::sampler::capture::pmu::machine())
    }

    /// [`EventSpec::parse_all`] on a machine with the precise memory `units`.
    pub fn parse_with(
        text: &str,
        units: Option<&PreciseUnits>,
    ) -> Result<Vec<EventSpec>, SpecError> {
        let (name, rate) = match text.split_once('@') {
            Some((n, r)) => (n, Some(r)),
            None => (text, None),
        };
        let event = find(name).ok_or_else(|| SpecError::Unknown(name.to_string()))?;
        let bad = || SpecError::BadRate {
            name: name.to_string(),
            rate: rate.unwrap_or_default().to_string(),
        };
        let mut sampling = match rate {
            _ if event.is_off_cpu() && rate.is_some() => return Err(SpecError::OffCpuRate),
            None if event.is_off_cpu() => Sampling::Period(1),
            None => Sampling::Frequency(DEFAULT_FREQUENCY),
            Some(r) => {
                let (freq, digits) = match r.strip_prefix('f') {
                    Some(d) => (true, d),
                    None => (false, r),
                };
                let n: u64 = digits.parse().map_err(|_| bad())?;
                if n == 0 {
                    return Err(bad());
                }
                if freq {
                    Sampling::Frequency(n)
                } else {
                    Sampling::Period(n)
                }
            }
        };
        let EventClass::Memory(op) = event.class else {
            return Ok(vec![EventSpec {
                event,
                sampling,
                grouping: Grouping::Alone,
            }]);
        };
        let refuse =
            |why: Option<&str>| SpecError::PreciseMemory(precise_memory_refusal(name, units, why));
        let Some(units) = units.filter(|u| u.delivers_samples()) else {
            return Err(refuse(None));
        };
        // IBS counts its period in 16s (the low 4 bits of its counter cannot be set).
        if let (UnitKind::Ibs, Sampling::Period(p)) = (units.kind, sampling) {
            sampling = Sampling::Period((p & !0xf).max(16));
        }
        let ops: &[MemOp] = match op {
            MemOp::Both => units.mem_ops(),
            MemOp::Loads => &[MemOp::Loads],
            MemOp::Stores => &[MemOp::Stores],
        };
        ops.iter()
            .map(|&op| {
                if let Err(why) = units.events(op) {
                    return Err(refuse(Some(&why)));
                }
                let event = KNOWN_EVENTS
                    .iter()
                    .find(|e| e.class == EventClass::Memory(op))
                    .expect("every memory operation has an event");
                Ok(EventSpec {
                    event,
                    sampling,
                    grouping: Grouping::Alone,
                })
            })
            .collect()
    }

    /// The same request for another event (used by the `cycles` fallback).
    pub fn with_event(self, event: &'static KnownEvent) -> EventSpec {
        EventSpec { event, ..self }
    }

    /// The descriptor stored in `profile.db`; `requested` names the event the user asked for
    /// when a fallback replaced it.
    pub fn describe(&self, requested: Option<&str>) -> EventDesc {
        EventDesc {
            name: self.event.name.to_string(),
            requested: requested.map(str::to_string),
            sampling: self.sampling,
            unit: self.event.unit.to_string(),
        }
    }
}

/// Why the precise memory events among `specs` cannot be sampled together on a machine with
/// `units`, if they cannot: AMD's IBS has one op sampler per CPU, which `mem`, `mem-loads`
/// and `mem-stores` would all use.
pub fn check_together(specs: &[EventSpec], units: Option<&PreciseUnits>) -> Result<(), SpecError> {
    let memory = specs
        .iter()
        .filter(|s| matches!(s.event.class, EventClass::Memory(_)))
        .count();
    match units {
        Some(u) if u.kind == UnitKind::Ibs && memory > 1 => Err(SpecError::PreciseMemory(
            "AMD IBS samples loads and stores with one op sampler per CPU: ask for one of \
             -e mem, -e mem-loads, -e mem-stores"
                .into(),
        )),
        _ => Ok(()),
    }
}

impl std::fmt::Display for EventSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.sampling {
            Sampling::Period(p) => write!(f, "{}@{}", self.event.name, p),
            Sampling::Frequency(hz) => write!(f, "{}@f{}", self.event.name, hz),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_periods_and_frequencies() {
        let e = EventSpec::parse("cycles").unwrap();
        assert_eq!(e.event.name, "cycles");
        assert_eq!(e.sampling, Sampling::Frequency(DEFAULT_FREQUENCY));
        let e = EventSpec::parse("page-faults@10").unwrap();
        assert_eq!(e.sampling, Sampling::Period(10));
        let e = EventSpec::parse("task-clock@f250").unwrap();
        assert_eq!((e.event.unit, e.sampling), ("ns", Sampling::Frequency(250)));
        assert_eq!(e.to_string(), "task-clock@f250");
    }

    /// The units of a fake event-source directory built by `build`.
    fn units(build: fn(&std::path::Path)) -> Option<PreciseUnits> {
        let dir = tempfile::tempdir().unwrap();
        build(dir.path());
        PreciseUnits::detect(dir.path())
    }

    fn names(specs: &[EventSpec]) -> Vec<String> {
        specs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn precise_memory_events_are_refused_with_what_works_instead() {
        for units in [None, units(crate::sampler::capture::pmu::tests::arm)] {
            for event in ["mem", "mem-loads@1000", "mem-stores"] {
                let Err(SpecError::PreciseMemory(why)) =
                    EventSpec::parse_with(event, units.as_ref())
                else {
                    panic!("{event} accepted");
                };
                assert!(why.contains("page-faults --data"), "{why}");
                assert!(why.contains("cpu-clock --data"), "{why}");
                assert!(!why.contains('\n'), "{why}");
                match &units {
                    None => assert!(why.starts_with("no precise memory sampling"), "{why}"),
                    Some(_) => assert!(why.contains("arm_spe_0") && why.contains("AUX"), "{why}"),
                }
            }
        }
    }

    #[test]
    fn precise_memory_events_name_what_the_machine_samples() {
        let intel = units(crate::sampler::capture::pmu::tests::intel);
        let parse = |text, u: &Option<PreciseUnits>| {
            names(&EventSpec::parse_with(text, u.as_ref()).unwrap())
        };
        assert_eq!(
            parse("mem", &intel),
            ["mem-loads@f1000", "mem-stores@f1000"]
        );
        assert_eq!(parse("mem-loads@5000", &intel), ["mem-loads@5000"]);
        assert_eq!(parse("mem-stores@f200", &intel), ["mem-stores@f200"]);
        let spec = EventSpec::parse_with("mem-loads", intel.as_ref()).unwrap();
        assert_eq!(spec[0].event.data_source(), DataSource::Precise);
        let amd = units(crate::sampler::capture::pmu::tests::amd);
        assert_eq!(parse("mem", &amd), ["mem@f1000"]);
        // IBS periods are multiples of 16.
        assert_eq!(parse("mem-loads@1000", &amd), ["mem-loads@992"]);
        assert_eq!(parse("mem@5", &amd), ["mem@16"]);
        let hybrid = units(crate::sampler::capture::pmu::tests::hybrid);
        assert_eq!(
            parse("mem@100", &hybrid),
            ["mem-loads@100", "mem-stores@100"]
        );
    }

    #[test]
    fn rejects_unknown_events_and_bad_rates() {
        assert_eq!(
            EventSpec::parse("bogus"),
            Err(SpecError::Unknown("bogus".into()))
        );
        for bad in ["cycles@", "cycles@f", "cycles@0", "cycles@fx", "cycles@-3"] {
            assert!(
                matches!(EventSpec::parse(bad), Err(SpecError::BadRate { .. })),
                "{bad}"
            );
        }
    }
}
