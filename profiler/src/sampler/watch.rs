//! `hpcrun-rs --watch`: producer/consumer bindings from hardware watchpoints
//! (`PERF_TYPE_BREAKPOINT`, read-write, `sample_period` 1), results in [`crate::format::watchdb`].
//!
//! The command is stopped right after its `exec` (ptrace), where the executable's load address
//! is known (PIE); the watchpoints are opened then, and the command let go. Each trap's sample
//! ip is the instruction after the access: `code` decodes the instruction before it to name
//! the function and tell a read from a write (x86 watchpoints cannot watch reads alone).
//!
//! - `--watch VAR[,VAR]` (at most 4): one read-write watchpoint on the first 1, 2, 4 or 8
//!   bytes of each variable for the whole run, every thread (inherited, one per CPU), so
//!   every access of the watched words traps: reads and writes by function are exact.
//! - `--watch sample[@HZ]` (default [`DEFAULT_HZ`]): HZ times a second, one watchpoint, on
//!   every thread (inherited, one event per CPU, each modification and enabling applying to
//!   the threads' inherited copies), is moved (`PERF_EVENT_IOC_MODIFY_ATTRIBUTES`) to an
//!   8-byte word drawn uniformly from the executable's writable static data, the stacks of the
//!   launched process's threads and with `--data` its live heap blocks (`targets`), and armed
//!   until [`WINDOW_TRAPS`] traps (each CPU's ring wakes hpcrun-rs at its share of them; a few
//!   more may land before it disarms) or [`WINDOW_MS`] ms, so a producer in one thread and its
//!   consumers in others are seen. `PERF_EVENT_IOC_REFRESH`, which would let the kernel disarm it,
//!   re-armed only the first window on this kernel (6.18), hence the reader's disarming. See
//!   `sampler` for the estimator.
//!
//! In both modes a read by function C of a word whose last writer (in this window, for
//! sampling) was another function P adds the bytes read to the binding P -> C.

mod code;
mod libraries;
mod sampler;
mod targets;

use std::collections::{BTreeSet, HashMap};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use byteorder::LittleEndian;
use perf_event_open_sys::bindings as sys;

use crate::format::watchdb::{Binding, WatchAccess, WatchMode, WatchProfile, WatchedVar};
use crate::sampler::capture::ring::Ring;
use crate::sampler::record::recorder::Recorder;
use code::{Access, Executable};
use libraries::Libraries;
use sampler::Sampler;
use targets::{Live, Targets};

/// Watchpoint windows per second of `--watch sample` without `@HZ`.
pub const DEFAULT_HZ: u64 = 50;
/// Traps after which a sampling window's watchpoint is disarmed.
pub const WINDOW_TRAPS: u32 = 10;
/// The longest a sampling window stays armed, in ms.
pub const WINDOW_MS: u64 = 5;
/// The most variables `--watch VAR` watches at once (x86 has four debug registers).
pub const MAX_VARIABLES: usize = 4;
/// Data pages per watch ring, halved while the locked-memory limit refuses it.
const RING_PAGES: usize = 128;

/// What `--watch` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchRequest {
    /// Named static variables of the executable.
    Variables(Vec<String>),
    /// Sampled words, this many windows a second.
    Sample {
        /// Windows per second.
        hz: u64,
    },
}

impl WatchRequest {
    /// Parse the `--watch` arguments (each one name, `sample[@HZ]` or a comma list); `None`
    /// when there are none.
    pub fn parse(args: &[String]) -> Result<Option<WatchRequest>, String> {
        let items: Vec<&str> = args
            .iter()
            .flat_map(|a| a.split(','))
            .map(str::trim)
            .collect();
        if items.is_empty() {
            return Ok(None);
        }
        if let Some(i) = items
            .iter()
            .position(|i| *i == "sample" || i.starts_with("sample@"))
        {
            if items.len() > 1 {
                return Err("--watch sample cannot be combined with named variables".into());
            }
            let hz = match items[i].strip_prefix("sample@") {
                None => DEFAULT_HZ,
                Some(n) => match n.parse::<u64>() {
                    Ok(hz) if (1..=10_000).contains(&hz) => hz,
                    _ => return Err(format!("--watch {}: HZ must be 1..=10000", items[i])),
                },
            };
            return Ok(Some(WatchRequest::Sample { hz }));
        }
        if let Some(bad) = items.iter().find(|i| {
            i.is_empty()
                || !i
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        }) {
            return Err(format!("--watch: `{bad}` is not a variable name"));
        }
        if items.len() > MAX_VARIABLES {
            return Err(format!(
                "--watch: at most {MAX_VARIABLES} variables can be watched at once (the \
                 processor has {MAX_VARIABLES} debug registers), {} given",
                items.len()
            ));
        }
        Ok(Some(WatchRequest::Variables(
            items.iter().map(|s| s.to_string()).collect(),
        )))
    }
}

/// A `--watch` request checked against the executable before the command starts.
pub struct WatchPlan {
    exe: Executable,
    request: WatchRequest,
    vars: Vec<WatchedVar>,
    heap_min: Option<u64>,
}

impl WatchPlan {
    /// Check `request` against the executable `program`: every named variable must be a
    /// static in its symbol table (the error is the user's to fix).
    pub fn new(program: &Path, request: WatchRequest) -> Result<WatchPlan, String> {
        let exe = Executable::read(program)?;
        let mut vars = Vec::new();
        if let WatchRequest::Variables(names) = &request {
            for name in names {
                let (address, size) = exe.variable(name).ok_or_else(|| {
                    format!(
                        "--watch {name}: no static variable `{name}` in {}",
                        program.display()
                    )
                })?;
                // The largest power-of-two length that the variable fills and its address
                // is aligned to (the debug registers' rule).
                let watched = [8u8, 4, 2, 1]
                    .into_iter()
                    .find(|&l| size >= l as u64 && address.is_multiple_of(l as u64))
                    .unwrap_or(1);
                vars.push(WatchedVar {
                    name: name.clone(),
                    address,
                    size,
                    watched,
                });
            }
        }
        if matches!(request, WatchRequest::Sample { .. }) && exe.data.is_empty() {
            return Err(format!(
                "--watch sample: {} has no writable static data to watch",
                program.display()
            ));
        }
        Ok(WatchPlan {
            exe,
            request,
            vars,
            heap_min: None,
        })
    }

    /// Let `--watch sample` also draw its words from the live heap blocks (of at least
    /// `min_block` bytes) that the allocation tracking of `--data` reports.
    pub fn with_heap_targets(mut self, min_block: u64) -> WatchPlan {
        self.heap_min = Some(min_block);
        self
    }
}

/// The attribute of a read-write watchpoint on `len` bytes at runtime address `addr`, inherited
/// by every thread; with `wakeup` (sampling: the traps after which the ring wakes the reader)
/// it starts disabled, without it enabled (exact: the ring wakes the reader when half full).
fn breakpoint(addr: u64, len: u8, wakeup: Option<u32>) -> sys::perf_event_attr {
    let mut a = sys::perf_event_attr {
        size: std::mem::size_of::<sys::perf_event_attr>() as u32,
        type_: sys::PERF_TYPE_BREAKPOINT,
        ..Default::default()
    };
    a.bp_type = sys::HW_BREAKPOINT_RW;
    a.__bindgen_anon_3.bp_addr = addr;
    a.__bindgen_anon_4.bp_len = len as u64;
    a.__bindgen_anon_1.sample_period = 1;
    a.sample_type = (sys::PERF_SAMPLE_IP
        | sys::PERF_SAMPLE_TID
        | sys::PERF_SAMPLE_TIME
        | sys::PERF_SAMPLE_ADDR) as u64;
    a.set_inherit(1);
    a.set_disabled(wakeup.is_some() as u64);
    a.set_exclude_kernel(1);
    a.set_exclude_hv(1);
    a.set_use_clockid(1);
    a.clockid = libc::CLOCK_MONOTONIC;
    match wakeup {
        Some(traps) => a.__bindgen_anon_2.wakeup_events = traps,
        None => {
            a.set_watermark(1);
            a.__bindgen_anon_2.wakeup_watermark = (RING_PAGES * 4096 / 8) as u32;
        }
    }
    a
}

/// The attribute of `--watch sample`'s watchpoint on the 8-byte word `word`, one of `events`
/// per-CPU events: each wakes the reader at its share of a window's traps, so the reader
/// hears of a full window wherever its traps ran.
fn sampling_breakpoint(word: u64, events: usize) -> sys::perf_event_attr {
    let wakeup = WINDOW_TRAPS.div_ceil(events.max(1) as u32);
    breakpoint(word, 8, Some(wakeup))
}

/// Map a ring for `fd`, halving its size while the locked-memory limit refuses it.
fn map_ring(fd: &OwnedFd) -> std::io::Result<Ring> {
    let mut pages = RING_PAGES;
    loop {
        match Ring::map(fd.try_clone()?, pages) {
            Ok(r) => return Ok(r),
            Err(e) if pages > 4 && e.raw_os_error() == Some(libc::EPERM) => pages /= 2,
            Err(e) => return Err(e),
        }
    }
}

/// One trap, as read from a ring.
#[derive(Debug, Clone, Copy)]
struct Trap {
    ip: u64,
    time: u64,
    addr: u64,
}

/// Watchpoints armed on a running command, and what their traps said so far.
pub struct Watcher {
    pid: i32,
    exe: Executable,
    bias: u64,
    rings: Vec<Ring>,
    fds: Vec<OwnedFd>,
    vars: Vec<WatchedVar>,
    sampler: Option<Sampler>,
    tally: Tally,
    libraries: Libraries,
}

/// Function names, accesses and bindings, as they accumulate.
#[derive(Default)]
struct Tally {
    functions: Vec<String>,
    index: HashMap<String, u32>,
    accesses: HashMap<(u32, u32), (u64, u64)>,
    pairs: HashMap<(u32, u32), PairSeen>,
    last_writer: HashMap<u64, u32>,
    traps: u64,
    lost: u64,
}

/// What was seen of one binding.
#[derive(Default, Clone)]
struct PairSeen {
    bytes: u64,
    reads: u64,
    words: BTreeSet<u64>,
}

impl Tally {
    fn function(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.functions.len() as u32;
        self.functions.push(name.to_string());
        self.index.insert(name.to_string(), i);
        i
    }

    /// Follow one access of the watched word at `word` (`len` bytes) by function `f`:
    /// returns the binding a read feeds and its bytes, if any (not yet [`Tally::record`]ed).
    fn bind(&mut self, word: u64, f: u32, a: Access, len: u64) -> Option<((u32, u32), u64)> {
        let mut fed = None;
        if a.read || !a.write {
            if let Some(&p) = self.last_writer.get(&word) {
                if p != f {
                    fed = Some(((p, f), a.size.clamp(1, len)));
                }
            }
        }
        if a.write {
            self.last_writer.insert(word, f);
        }
        fed
    }

    /// Count one read of `bytes` of `word` for binding `pair`.
    fn record(&mut self, pair: (u32, u32), bytes: u64, word: u64) {
        let seen = self.pairs.entry(pair).or_default();
        seen.bytes += bytes;
        seen.reads += 1;
        seen.words.insert(word);
    }
}

impl Watcher {
    /// Open the watchpoints of `plan` on process `pid`, stopped after its `exec` (every CPU in
    /// `cpus` for inherited per-variable watchpoints).
    pub fn start(pid: i32, plan: WatchPlan, cpus: &[i32]) -> Result<Watcher, String> {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .map_err(|e| format!("cannot see process {pid}'s executable: {e}"))?;
        let exe = exe.as_path();
        let load = (exe.to_str())
            .and_then(|path| code::load_address(&code::mappings(pid), path))
            .ok_or_else(|| format!("cannot find where {} was loaded", exe.display()))?;
        let bias = load.wrapping_sub(plan.exe.first_page);
        let mut rings = Vec::new();
        let mut fds = Vec::new();
        let open_err = |e: std::io::Error| format!("cannot open a hardware watchpoint: {e}");
        let sampler = match plan.request {
            WatchRequest::Variables(_) => {
                for &cpu in cpus {
                    let mut leader: Option<usize> = None;
                    for v in &plan.vars {
                        let attr = breakpoint(v.address.wrapping_add(bias), v.watched, None);
                        let fd = crate::sampler::capture::perf::open(&attr, pid, cpu)
                            .map_err(open_err)?;
                        match leader {
                            None => {
                                rings.push(map_ring(&fd).map_err(open_err)?);
                                leader = Some(rings.len() - 1);
                            }
                            Some(l) => crate::sampler::capture::perf::redirect(&fd, rings[l].fd())
                                .map_err(open_err)?,
                        }
                        fds.push(fd);
                    }
                }
                None
            }
            WatchRequest::Sample { hz } => {
                let targets = Targets::new(&plan.exe.data, bias, plan.heap_min);
                let mut s = Sampler::new(hz, targets);
                let attr = sampling_breakpoint(s.pick(pid, &Live::default()), cpus.len());
                for &cpu in cpus {
                    let fd =
                        crate::sampler::capture::perf::open(&attr, pid, cpu).map_err(open_err)?;
                    rings.push(map_ring(&fd).map_err(open_err)?);
                    fds.push(fd);
                }
                Some(s)
            }
        };
        Ok(Watcher {
            pid,
            exe: plan.exe,
            bias,
            rings,
            fds,
            vars: plan.vars,
            sampler,
            tally: Tally::default(),
            libraries: Libraries::default(),
        })
    }

    /// The descriptors whose readiness means traps are waiting.
    pub fn poll_fds(&self) -> impl Iterator<Item = &OwnedFd> {
        self.rings.iter().map(|r| r.fd())
    }

    /// How long the caller may sleep before the next tick (reading traps, moving the
    /// watchpoint) is due, in ms.
    pub fn sleep_ms(&self) -> u16 {
        self.sampler.as_ref().map_or(50, |s| s.sleep_ms())
    }

    /// Read every trap waiting; with sampling, close a window that is over and arm the next
    /// one when it is due, drawing its word from the targets that `recorder` says are live
    /// in the launched process (its threads' stacks; its heap blocks, with heap targets).
    pub(crate) fn tick(&mut self, recorder: &Recorder) {
        self.drain();
        let Some(s) = self.sampler.as_ref() else {
            return;
        };
        if s.should_close() {
            for fd in &self.fds {
                crate::sampler::capture::perf::set_enabled(fd, false);
            }
            // Traps of the closing window still in the ring belong to it.
            self.drain();
            let s = self.sampler.as_mut().expect("sampling");
            s.close_window(&mut self.tally);
        }
        let s = self.sampler.as_mut().expect("sampling");
        if !s.should_open() {
            return;
        }
        let live = Live {
            heap: recorder.live_heap(self.pid as u32),
            stack_pointers: recorder.stack_pointers(self.pid as u32),
        };
        let mut attr = sampling_breakpoint(s.pick(self.pid, &live), self.fds.len());
        // SAFETY: MODIFY_ATTRIBUTES reads one attribute through the pointer; ENABLE takes no
        // argument. Both apply to the event's inherited copies too (Linux 5.13 and later).
        let armed = self.fds.iter().all(|fd| unsafe {
            perf_event_open_sys::ioctls::MODIFY_ATTRIBUTES(fd.as_raw_fd(), &mut attr) == 0
        }) && self
            .fds
            .iter()
            .all(|fd| unsafe { perf_event_open_sys::ioctls::ENABLE(fd.as_raw_fd(), 0) == 0 });
        s.opened(armed);
    }

    /// Read every trap in the rings.
    fn drain(&mut self) {
        let mut traps = Vec::new();
        for ring in &mut self.rings {
            ring.fill();
            while let Some(rec) = ring.peek() {
                let mut d = rec.data;
                match rec.record_type {
                    sys::PERF_RECORD_SAMPLE => {
                        let ip = d.read_u64::<LittleEndian>().unwrap_or(0);
                        let _pid_tid = d.read_u64::<LittleEndian>();
                        let time = d.read_u64::<LittleEndian>().unwrap_or(0);
                        let addr = d.read_u64::<LittleEndian>().unwrap_or(0);
                        traps.push(Trap { ip, time, addr });
                    }
                    sys::PERF_RECORD_LOST => {
                        let _id = d.read_u64::<LittleEndian>();
                        self.tally.lost += d.read_u64::<LittleEndian>().unwrap_or(0);
                    }
                    // A throttled watchpoint misses traps without counting them: say so.
                    sys::PERF_RECORD_THROTTLE => self.tally.lost += 1,
                    _ => {}
                }
                ring.advance();
            }
            ring.release();
        }
        // One time order over the CPUs' rings: who wrote last decides the producer.
        traps.sort_by_key(|t| t.time);
        for t in traps {
            self.trap(t);
        }
    }

    fn trap(&mut self, t: Trap) {
        self.tally.traps += 1;
        let link = t.ip.wrapping_sub(self.bias);
        let (f, access) = match self.exe.access_before(link) {
            Some((name, a)) => (self.tally.function(name), a),
            None => {
                let (name, a) = match self.exe.function(link.wrapping_sub(1)) {
                    Some((_, n)) => (n.to_string(), None),
                    None => self.libraries.access_before(self.pid, t.ip),
                };
                // Undecodable: a read (the common case; x86 cannot tell us).
                let a = a.unwrap_or(Access {
                    read: true,
                    write: false,
                    size: 8,
                });
                (self.tally.function(&name), a)
            }
        };
        match &mut self.sampler {
            Some(s) => s.trap(&mut self.tally, t.addr, t.time, f, access),
            None => {
                let Some(var) = self
                    .vars
                    .iter()
                    .position(|v| v.address.wrapping_add(self.bias) == t.addr)
                else {
                    return;
                };
                let e = self.tally.accesses.entry((var as u32, f)).or_default();
                e.0 += access.read as u64;
                e.1 += access.write as u64;
                let len = self.vars[var].watched as u64;
                if let Some((pair, bytes)) = self.tally.bind(t.addr, f, access, len) {
                    self.tally.record(pair, bytes, t.addr);
                }
            }
        }
    }

    /// Disarm everything, read the last traps, and say what was measured.
    pub fn finish(mut self) -> WatchProfile {
        for fd in &self.fds {
            crate::sampler::capture::perf::set_enabled(fd, false);
        }
        self.drain();
        let (mode, bindings) = match self.sampler.take() {
            Some(s) => s.finish(&mut self.tally),
            None => {
                let bindings = exact_bindings(&self.tally);
                (WatchMode::Variables(self.vars.clone()), bindings)
            }
        };
        let mut accesses: Vec<WatchAccess> = (self.tally.accesses.iter())
            .map(|(&(var, function), &(reads, writes))| WatchAccess {
                var,
                function,
                reads,
                writes,
            })
            .collect();
        accesses.sort_by_key(|a| (a.var, a.function));
        WatchProfile {
            mode,
            functions: std::mem::take(&mut self.tally.functions),
            accesses,
            bindings,
            traps: self.tally.traps,
            lost: self.tally.lost,
        }
    }
}

/// The bindings of watched variables: exactly what was seen.
fn exact_bindings(tally: &Tally) -> Vec<Binding> {
    let mut out: Vec<Binding> = (tally.pairs.iter())
        .map(|(&(producer, consumer), seen)| Binding {
            producer,
            consumer,
            stack: false,
            bytes: seen.bytes as f64,
            bytes_error: 0.0,
            addresses: seen.words.len() as f64 * 8.0,
            seen_bytes: seen.bytes,
            seen_reads: seen.reads,
        })
        .collect();
    out.sort_by_key(|b| (b.producer, b.consumer));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_bad_ones_are_refused() {
        let p =
            |a: &[&str]| WatchRequest::parse(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(p(&[]), Ok(None));
        assert_eq!(
            p(&["buf,x", "y"]),
            Ok(Some(WatchRequest::Variables(vec![
                "buf".into(),
                "x".into(),
                "y".into()
            ])))
        );
        assert_eq!(
            p(&["sample"]),
            Ok(Some(WatchRequest::Sample { hz: DEFAULT_HZ }))
        );
        assert_eq!(
            p(&["sample@500"]),
            Ok(Some(WatchRequest::Sample { hz: 500 }))
        );
        assert!(p(&["a,b,c,d,e"]).unwrap_err().contains("at most 4"));
        assert!(p(&["sample@0"]).is_err());
        assert!(p(&["sample", "buf"]).is_err());
        assert!(p(&["a b"]).is_err());
    }

    #[test]
    fn a_read_binds_the_last_other_writer_and_a_writer_reading_itself_does_not() {
        let mut t = Tally::default();
        let (p, c) = (t.function("produce"), t.function("consume"));
        let w = Access {
            read: false,
            write: true,
            size: 8,
        };
        let r = Access {
            read: true,
            write: false,
            size: 8,
        };
        assert_eq!(t.bind(0x10, c, r, 8), None);
        t.bind(0x10, p, w, 8);
        assert_eq!(t.bind(0x10, p, r, 8), None);
        assert_eq!(t.bind(0x10, c, r, 4), Some(((p, c), 4)));
        t.record((p, c), 4, 0x10);
        let b = exact_bindings(&t);
        assert_eq!((b.len(), b[0].bytes, b[0].addresses), (1, 4.0, 8.0));
    }
}
