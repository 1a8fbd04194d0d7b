//! What `hpcrun-rs --watch` measured with hardware watchpoints, as stored in `profile.db`
//! (format version 7, the last part) and carried unchanged into the database.
//!
//! Two modes. `--watch VAR[,VAR...]` watches up to four named statics for the whole run: every
//! access of each watched word traps, so [`WatchProfile::accesses`] (reads and writes by
//! function) and [`WatchProfile::bindings`] are exact for those words. `--watch sample[@HZ]`
//! moves one watchpoint over the executable's static data and the threads' stacks (with
//! `--data` also the live heap blocks) HZ times a second; its bindings are
//! estimates for the whole region and the whole run ([`SampledWatch`] says how they were scaled
//! and each [`Binding`] carries its standard error).
//!
//! A binding P -> C exists when function C reads a watched word whose last writer was P
//! (P != C): QUAD's producer/consumer relation, seen through the watched words only.

use serde::{Deserialize, Serialize};

/// What a `--watch` run measured (empty when the run had no `--watch`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WatchProfile {
    /// How the words were chosen.
    pub mode: WatchMode,
    /// Function names that [`WatchAccess`] and [`Binding`] refer to by index: the symbol
    /// of the accessing instruction in the executable or the library it is in, else `<lib.so>`
    /// (a library without a symbol there) or `<unknown>`.
    pub functions: Vec<String>,
    /// Reads and writes of each watched variable by each function (`--watch VAR`).
    pub accesses: Vec<WatchAccess>,
    /// Producer -> consumer pairs.
    pub bindings: Vec<Binding>,
    /// Traps taken (watchpoint samples read).
    pub traps: u64,
    /// Traps the kernel could not record (ring full): an exact count is exact only at 0.
    pub lost: u64,
}

/// How the watched words were chosen. Variants are only ever added at the end: a file's
/// variant index stays valid (`SampledRegions` came after files of format version 8 held the
/// other three).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub enum WatchMode {
    /// No `--watch`.
    #[default]
    None,
    /// `--watch VAR`: these variables, for the whole run.
    Variables(Vec<WatchedVar>),
    /// `--watch sample[@HZ]` over the executable's static data alone (as files of format
    /// version 8 and older hold it).
    Sampled(SampledWatch),
    /// `--watch sample[@HZ]` over the static data, the threads' stacks and with `--data` the
    /// live heap blocks.
    SampledRegions(SampledWatch, Regions),
}

impl WatchMode {
    /// How a sampled watch was scaled, and its stack and heap targets if it had them; `None`
    /// when the words were not sampled.
    pub fn sampled(&self) -> Option<(&SampledWatch, Option<&Regions>)> {
        match self {
            WatchMode::Sampled(s) => Some((s, None)),
            WatchMode::SampledRegions(s, r) => Some((s, Some(r))),
            WatchMode::None | WatchMode::Variables(_) => None,
        }
    }
}

/// One variable watched by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WatchedVar {
    /// The symbol's name.
    pub name: String,
    /// Its link-time address in the executable.
    pub address: u64,
    /// The variable's size in bytes (symbol table).
    pub size: u64,
    /// Bytes watched from its start (1, 2, 4 or 8).
    pub watched: u8,
}

/// How a sampled watch was scaled to an estimate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampledWatch {
    /// Windows per second requested.
    pub hz: u64,
    /// Windows armed.
    pub windows: u64,
    /// Bytes of static data targets were drawn from (uniformly, in 8-byte words; the stacks and
    /// heap of [`WatchMode::SampledRegions`] are in its [`Regions`]).
    pub region_bytes: u64,
    /// Bytes watched per window.
    pub word: u8,
    /// Ns the watchpoint was armed, summed over windows.
    pub watched_ns: u64,
    /// Ns from the first window's start to the end of the last.
    pub span_ns: u64,
}

/// The regions a sampled watch drew its words from besides the static data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Regions {
    /// The threads' stacks, each from its last sampled stack pointer (less the red zone) to
    /// its top.
    pub stack: RegionShare,
    /// The live heap blocks (`--data`); `None` when they were not targets.
    pub heap: Option<RegionShare>,
    /// The smallest heap block tracked (`--alloc-min`) when the heap was a target.
    pub heap_min_block: u64,
}

/// One region's part in a sampled watch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegionShare {
    /// Windows whose word was in it.
    pub windows: u64,
    /// Its bytes at the windows' starts, averaged over all the windows.
    pub mean_bytes: u64,
}

impl SampledWatch {
    /// The factor from what the windows saw to the estimate for the whole region and span, in
    /// the mean: (region bytes / word) x (span / watched time), with the mean stack and heap
    /// bytes of `regions` in the region (the estimates scale each window by its own region and
    /// length).
    pub fn scale(&self, regions: Option<&Regions>) -> f64 {
        if self.watched_ns == 0 || self.word == 0 {
            return 0.0;
        }
        let region = self.region_bytes + regions.map_or(0, Regions::mean_bytes);
        (region as f64 / self.word as f64) * (self.span_ns as f64 / self.watched_ns as f64)
    }

    /// What the words were drawn from, in words: the static data, and the stacks and heap of
    /// `regions`.
    pub fn targets(&self, regions: Option<&Regions>) -> String {
        let statics = format!("{} bytes of static data", self.region_bytes);
        let Some(r) = regions else {
            return statics;
        };
        let heap = match &r.heap {
            Some(h) => format!(
                ", {} bytes of live heap (blocks of {} bytes or more)",
                h.mean_bytes, r.heap_min_block
            ),
            None => String::new(),
        };
        let windows = match &r.heap {
            Some(h) => format!(
                "{} on the stack, {} on the heap",
                r.stack.windows, h.windows
            ),
            None => format!("{} on the stack", r.stack.windows),
        };
        format!(
            "{statics}, {} bytes of stack{heap} on average ({windows})",
            r.stack.mean_bytes
        )
    }
}

impl Regions {
    /// Stack and heap bytes, averaged over the windows.
    fn mean_bytes(&self) -> u64 {
        self.stack.mean_bytes + self.heap.as_ref().map_or(0, |h| h.mean_bytes)
    }
}

/// Accesses of one watched variable by one function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchAccess {
    /// Index in [`WatchMode::Variables`].
    pub var: u32,
    /// Index in [`WatchProfile::functions`].
    pub function: u32,
    /// Read traps.
    pub reads: u64,
    /// Write traps (a read-modify-write counts as both).
    pub writes: u64,
}

/// One producer -> consumer pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Binding {
    /// Index in [`WatchProfile::functions`] of the last writer.
    pub producer: u32,
    /// Index in [`WatchProfile::functions`] of the reader.
    pub consumer: u32,
    /// Whether the words were on a stack (QUAD's `--no-stack` drops these).
    pub stack: bool,
    /// Bytes the consumer read that the producer wrote: exact for watched variables, the
    /// estimate for the whole run when sampled.
    pub bytes: f64,
    /// Standard error of [`Binding::bytes`] (0 when exact).
    pub bytes_error: f64,
    /// Unique byte addresses involved (estimated when sampled).
    pub addresses: f64,
    /// Bytes actually seen in the watched words (before scaling).
    pub seen_bytes: u64,
    /// Read traps that made up [`Binding::seen_bytes`].
    pub seen_reads: u64,
}

impl WatchProfile {
    /// Whether the run had no `--watch`.
    pub fn is_empty(&self) -> bool {
        self.mode == WatchMode::None
    }

    /// What makes the profile inconsistent (an index out of range), if anything.
    pub fn malformation(&self) -> Option<String> {
        let functions = self.functions.len();
        let vars = match &self.mode {
            WatchMode::Variables(v) => v.len(),
            _ => 0,
        };
        if let Some(a) = self
            .accesses
            .iter()
            .find(|a| a.var as usize >= vars || a.function as usize >= functions)
        {
            return Some(format!(
                "watch access of variable {} by function {} out of range",
                a.var, a.function
            ));
        }
        self.bindings
            .iter()
            .find(|b| b.producer as usize >= functions || b.consumer as usize >= functions)
            .map(|b| {
                format!(
                    "watch binding {} -> {} out of range",
                    b.producer, b.consumer
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_is_region_words_times_span_over_watched_time() {
        let s = SampledWatch {
            hz: 50,
            windows: 10,
            region_bytes: 4096,
            word: 8,
            watched_ns: 1_000,
            span_ns: 4_000,
        };
        assert_eq!(s.scale(None), 512.0 * 4.0);
        let regions = Regions {
            stack: RegionShare {
                windows: 2,
                mean_bytes: 1024,
            },
            heap: Some(RegionShare {
                windows: 4,
                mean_bytes: 3072,
            }),
            heap_min_block: 4096,
        };
        assert_eq!(s.scale(Some(&regions)), 1024.0 * 4.0);
        let bad = WatchProfile {
            functions: vec!["f".into()],
            bindings: vec![Binding {
                producer: 0,
                consumer: 1,
                stack: false,
                bytes: 1.0,
                bytes_error: 0.0,
                addresses: 1.0,
                seen_bytes: 1,
                seen_reads: 1,
            }],
            ..Default::default()
        };
        assert!(bad.malformation().unwrap().contains("0 -> 1"));
    }
}
