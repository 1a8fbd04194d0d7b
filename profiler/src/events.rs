//! Event names, their kernel encodings and units, and the `-e NAME[@PERIOD|@fFREQ]` syntax.

use std::path::Path;

use perf_event_open_sys::bindings as sys;

use crate::db::{EventDesc, Sampling};

/// The default sampling rate when `-e` gives none: about 1000 samples per second.
pub const DEFAULT_FREQUENCY: u64 = 1000;

/// Whether an event is counted by the CPU's performance monitoring unit or by the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventClass {
    /// Needs a hardware PMU (absent in most VMs).
    Hardware,
    /// Counted by the kernel; always available.
    Software,
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
        "cpu-migrations",
        sys::PERF_COUNT_SW_CPU_MIGRATIONS,
        "events",
        SW_COST,
    ),
];

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
        }
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

/// Where the kernel lists the machine's event sources (PMUs).
const EVENT_SOURCES: &str = "/sys/bus/event_source/devices";

/// The machine's units that sample memory accesses precisely, by their sysfs names: Intel's
/// PEBS load-latency and store events (`cpu*/events/mem-loads`), AMD's `ibs_op`, Arm's
/// `arm_spe_*`; empty where there are none (virtual machines, most clouds).
pub fn precise_memory_units(sources: &Path) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(sources) else {
        return Vec::new();
    };
    let mut units: Vec<String> = dir
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| {
            name == "ibs_op"
                || name.starts_with("arm_spe")
                || (name.starts_with("cpu") && sources.join(name).join("events/mem-loads").exists())
        })
        .collect();
    units.sort();
    units
}

/// Why `-e NAME` (a precise memory event) cannot be sampled, given the machine's `units`: none
/// here, or this build does not drive them yet; either way, what gives data addresses instead.
fn precise_memory_refusal(name: &str, units: &[String]) -> String {
    let instead = "data addresses are available from -e page-faults --data (exact, first touch) \
                   and -e cpu-clock --data (from the interrupted instruction)";
    if units.is_empty() {
        format!("no precise memory sampling on this machine for '{name}' (no PEBS, IBS or SPE unit in {EVENT_SOURCES}); {instead}")
    } else {
        format!(
            "'{name}' would use {} here, which this version of hpcrun-rs does not drive yet; {instead}",
            units.join(", ")
        )
    }
}

/// An event as requested on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventSpec {
    /// The event.
    pub event: &'static KnownEvent,
    /// How to sample it.
    pub sampling: Sampling,
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
}

impl EventSpec {
    /// Parse `NAME`, `NAME@PERIOD` or `NAME@fFREQ`.
    pub fn parse(text: &str) -> Result<EventSpec, SpecError> {
        let (name, rate) = match text.split_once('@') {
            Some((n, r)) => (n, Some(r)),
            None => (text, None),
        };
        if PRECISE_MEMORY_EVENTS.contains(&name) {
            return Err(SpecError::PreciseMemory(precise_memory_refusal(
                name,
                &precise_memory_units(Path::new(EVENT_SOURCES)),
            )));
        }
        let event = find(name).ok_or_else(|| SpecError::Unknown(name.to_string()))?;
        let bad = || SpecError::BadRate {
            name: name.to_string(),
            rate: rate.unwrap_or_default().to_string(),
        };
        let sampling = match rate {
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
        Ok(EventSpec { event, sampling })
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

    #[test]
    fn precise_memory_events_are_refused_with_what_works_instead() {
        let dir = tempfile::tempdir().unwrap();
        for unit in ["software", "cpu_core", "ibs_op"] {
            std::fs::create_dir_all(dir.path().join(unit).join("events")).unwrap();
        }
        assert_eq!(precise_memory_units(dir.path()), ["ibs_op"]);
        std::fs::write(dir.path().join("cpu_core/events/mem-loads"), "").unwrap();
        assert_eq!(precise_memory_units(dir.path()), ["cpu_core", "ibs_op"]);
        let none = precise_memory_refusal("mem", &[]);
        assert!(none.starts_with("no precise memory sampling"), "{none}");
        assert!(none.contains("page-faults --data"), "{none}");
        let some = precise_memory_refusal("mem-loads", &["ibs_op".into()]);
        assert!(some.contains("ibs_op"), "{some}");
        assert!(matches!(
            EventSpec::parse("mem-loads@1000"),
            Err(SpecError::PreciseMemory(_))
        ));
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
