//! The `profile.db` format: what one `hpcrun-rs` run measured.
//!
//! A file is one [`Profile`] in the tools' common [envelope](crate::format::envelope) (magic
//! `HPCRUNRS`, version 12: checksummed, then [tagged sections](crate::format::sections), each
//! one postcard value: 1 the profile, the module checksums, the [data references](crate::format::dataref), the data-source
//! histograms of precise memory samples ([`crate::format::dataref::MemorySources`], attached to their
//! [`crate::format::dataref::DataCost::sources`] when read), the run's place in a parallel job
//! ([`JobPlace`]), the [traces](crate::format::trace) (`-t`), the [watchpoint
//! results](crate::format::watchdb) (`--watch`) and the data traces
//! ([`crate::format::dataref::DataProfile::traces`], `-t --data`), sections 2 to 8 in that order,
//! then the OpenMP regions' timeline ([`RegionTimeline`], section 9) and the event groups
//! ([`Profile::read_with`], section 10), then the Python functions ([`Profile::python_code`],
//! section 11); a reader that does not know a section skips it. Version 12 call trees may hold
//! Python frames ([`Frame::Python`]), which version 11 ones have not.
//! Version 11 call trees may hold JIT frames named by a jitdump's load ([`Frame::Jit`]), which
//! version 10 ones have not, and version 11 checksums cover the version number too; version 10 trees may hold off-CPU reasons ([`Frame::Blocked`]),
//! which version 9 ones (the same sections) have not. Version 8 files hold the eight untagged, one after the other; version 7 files end before the
//! data traces, version 6 files before the watch part, version 5 files before the traces,
//! version 4 files after the histograms, version 3 files after the data
//! references, version 2 files have no data references, version 1 files neither these nor
//! checksums; all still read). It is the contract between `hpcrun-rs` (writer) and `hpcprof-rs`
//! (reader): every address in it is module-relative at link time
//! ([`Svma`](crate::format::addr::Svma)), so the correlator never needs to know where a module was
//! loaded. A profile that reads is well formed: every parent precedes its children, and every
//! module and event reference is in range. Each thread's calling-context tree is a [`Cct`].

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use crate::format::calltree::{
    AddrKind, BlockReason, Cct, CctNode, CctNodeId, Cost, Frame, ProfileModuleId,
};
use crate::format::dataref::{DataProfile, MemorySources};
use crate::format::envelope::{read_file, write_atomically, EnvelopeError, FileKind, Replace};
use crate::format::job::JobPlace;
use crate::format::openmp::RegionTimeline;
use crate::format::sections;
use crate::format::trace::Traces;
use crate::format::watchdb::WatchProfile;

/// The first eight bytes of every `profile.db`: how readers tell one from other files.
pub const PROFILE_MAGIC: [u8; 8] = *b"HPCRUNRS";

/// The kind of file a `profile.db` is. Private: a profile's body is in parts (the profile,
/// its modules' checksums, the data references, their data sources), so it is written and
/// read only through [`Profile::write`] and [`Profile::read`], never with the envelope's
/// one-part `write` and `decode`.
pub(crate) static PROFILE_FILE: FileKind = FileKind {
    magic: PROFILE_MAGIC,
    version: 12,
    oldest: 1,
    checked_since: 2,
    version_summed_since: 11,
    noun: "profile.db",
    writer: "hpcrun-rs",
};

/// Everything one run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// The command line that was measured (or `-p PID` target's command line).
    pub command: Vec<String>,
    /// Host name of the machine the run was on.
    pub host: String,
    /// Wall-clock start and end of the measurement, ns since the Unix epoch.
    pub start_ns: u64,
    /// See [`Profile::start_ns`].
    pub end_ns: u64,
    /// The events sampled; metric `i` of every node is for `events[i]`.
    pub events: Vec<EventDesc>,
    /// Whether kernel-mode samples were taken (attributed under `<kernel>` leaves).
    pub kernel_included: bool,
    /// Every load module any path refers to.
    pub modules: Vec<ModuleInfo>,
    /// Every process seen.
    pub processes: Vec<ProcessInfo>,
    /// One calling-context tree per thread.
    pub threads: Vec<ThreadProfile>,
    /// Run-wide counters.
    pub stats: Stats,
    /// Data references and allocation sites (`hpcrun-rs --data`; empty otherwise). Stored
    /// after the module checksums (format version 3), and their data sources after them
    /// (version 4), not inside the profile.
    #[serde(skip)]
    pub data: DataProfile,
    /// The run's rank and job id under an MPI launcher or batch system (none for a run outside
    /// one). Stored after the histograms (format version 5); older files read without.
    #[serde(skip)]
    pub job: JobPlace,
    /// Per thread, (time, tree node) of every sample of the first event (`hpcrun-rs -t`;
    /// empty otherwise). Stored last (format version 6).
    #[serde(skip)]
    pub traces: Traces,
    /// What `hpcrun-rs --watch` measured (empty otherwise). Stored after the traces (format
    /// version 7).
    #[serde(skip)]
    pub watch: WatchProfile,
    /// When each OpenMP parallel region and each thread's share of it ran, as hpcrun-rs's
    /// OpenMP tool recorded them (runtimes with the tools interface only; empty otherwise).
    /// Stored after the data traces (section 9).
    #[serde(skip)]
    pub regions: RegionTimeline,
    /// Per event, the event whose samples read its counts (`-e '{LEADER,MEMBER}'`: each of
    /// the leader's samples carries what the member counted since the thread's previous one),
    /// or `None` for an event sampled itself. Stored after the regions (section 10); empty in
    /// older files and where no event was in a group.
    #[serde(skip)]
    pub read_with: Vec<Option<u32>>,
    /// The Python functions [`Frame::Python`] frames name (index = `code`). Stored after the
    /// event groups (section 11); empty in older files and where no Python frame was read.
    #[serde(skip)]
    pub python_code: Vec<PythonCode>,
}

/// A Python function, as its code object names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PythonCode {
    /// Its qualified name (`Class.method`, `outer.<locals>.inner`).
    pub name: String,
    /// The file it was compiled from.
    pub file: String,
    /// The line its definition starts at.
    pub first_line: u32,
}

/// The name of the event of off-CPU time: each sample a switch of a thread away from the CPU,
/// its value the time (ns) until the thread ran again; sampled at every switch.
pub const OFF_CPU_EVENT: &str = "off-cpu";

/// How an event was sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Sampling {
    /// One sample every N events.
    Period(u64),
    /// About N samples per second (the kernel adjusts the period).
    Frequency(u64),
}

/// One sampled event, as it was actually opened (after any fallback).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventDesc {
    /// The event's name, e.g. `cpu-clock`.
    pub name: String,
    /// What the user asked for, when a fallback replaced it (e.g. `cycles`).
    pub requested: Option<String>,
    /// How it was sampled.
    pub sampling: Sampling,
    /// The unit of metric values: `ns` for clocks, `events` otherwise.
    pub unit: String,
}

impl EventDesc {
    /// The event `name` as requested (no fallback), sampled as `sampling`, in `unit`.
    pub fn new(name: &str, sampling: Sampling, unit: &str) -> EventDesc {
        EventDesc {
            name: name.to_string(),
            requested: None,
            sampling,
            unit: unit.to_string(),
        }
    }
}

/// A load module: an executable, a shared library, or a kernel-provided image such as `[vdso]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModuleInfo {
    /// Path of the file as mapped (or a name in brackets such as `[vdso]`).
    pub path: String,
    /// GNU build-id, when the file has one.
    pub build_id: Option<Vec<u8>>,
    /// For a file without a build-id, a checksum of its bytes ([`file_checksum`]) taken when
    /// the run first saw it, so that the correlator can tell the same file from another one of
    /// the same path, size and time (a rebuild copied with `cp -p`). Stored after the profile
    /// in the file (format version 2), not inside it: version 1 files have none.
    #[serde(skip)]
    pub checksum: Option<u32>,
}

/// The checksum of a module file's bytes recorded in [`ModuleInfo::checksum`]: CRC-32 of the
/// whole file: about 0.2 ms per MiB (6 GiB/s over a 73 MiB file, 0.05 ms for a 1.8 MiB libc
/// in cache), paid once per module without a build-id.
pub fn file_checksum(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// A process seen during the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// Process id.
    pub pid: u32,
    /// Parent process id (0 when unknown).
    pub ppid: u32,
    /// Last command name (`comm`) seen for it.
    pub comm: String,
}

/// One thread's calling-context tree and its identity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadProfile {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Command name of the thread.
    pub comm: String,
    /// The thread's calling-context tree.
    pub cct: Cct,
}

/// Run-wide counters, reported in the summary and kept in the file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Samples received.
    pub samples: u64,
    /// Records the kernel could not deliver (`PERF_RECORD_LOST`).
    pub lost: u64,
    /// Samples whose path could not be completed (filed under `<partial call paths>`).
    pub partial: u64,
    /// Partial paths that were completed from the thread's previous path (deep stacks).
    pub stitched: u64,
    /// Throttle records (the kernel lowered the sampling rate).
    pub throttled: u64,
}

/// Why a `profile.db` could not be read or written.
pub type DbError = EnvelopeError;

impl Profile {
    /// A profile of `command` sampling `events` in which nothing has been measured yet: no
    /// module, process or thread, zero times and counters, every later part empty. What
    /// builds a profile other than a run (tests, synthetic inputs) starts here and sets what it
    /// has (`Profile { threads, ..Profile::new(command, events) }`), so that a part added to
    /// the format does not have to be spelled out at each of them.
    pub fn new(command: Vec<String>, events: Vec<EventDesc>) -> Profile {
        Profile {
            command,
            host: String::new(),
            start_ns: 0,
            end_ns: 0,
            events,
            kernel_included: false,
            modules: Vec::new(),
            processes: Vec::new(),
            threads: Vec::new(),
            stats: Stats::default(),
            data: DataProfile::default(),
            job: JobPlace::default(),
            traces: Traces::default(),
            watch: WatchProfile::default(),
            regions: RegionTimeline::default(),
            read_with: Vec::new(),
            python_code: Vec::new(),
        }
    }

    /// Decode a profile from a file's bytes, checking that every thread's tree is well formed
    /// so that later stages can index without checks; `path` names the file in errors.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Profile, DbError> {
        let body = PROFILE_FILE.body(bytes, path)?;
        let corrupt = |e| PROFILE_FILE.corrupt(path, e);
        let malformed = |why| PROFILE_FILE.malformed(path, why);
        let mut parts = Parts::default();
        // Versions 1 to 8: the first `version` sections, untagged.
        let untagged = (body.version < TAGGED_SINCE).then_some(body.version);
        let taken = sections::take_all(body.bytes, untagged, LAST_SECTION, |id, bytes| {
            parts.take(id, bytes)
        });
        match taken {
            Ok(()) => {}
            Err(sections::TakeError::Corrupt(e)) => return Err(corrupt(e)),
            Err(sections::TakeError::Malformed(why)) => return Err(malformed(why)),
        }
        let profile = parts.assemble(body.version).map_err(malformed)?;
        profile.check().map_err(malformed)?;
        Ok(profile)
    }

    /// Why the profile is not well formed: a thread's tree, the data references, the traces or
    /// the watch results pointing outside what the profile holds.
    fn check(&self) -> Result<(), String> {
        let (events, modules) = (self.events.len(), self.modules.len());
        for thread in &self.threads {
            if let Some(why) = thread.cct.malformation(events, modules) {
                return Err(format!("thread {}: {why}", thread.tid));
            }
        }
        let trees: Vec<(u32, &Cct)> = self.threads.iter().map(|t| (t.tid, &t.cct)).collect();
        if let Some(why) = self.data.malformation(&trees, events, modules) {
            return Err(why);
        }
        let nodes_of = |tid| Some(self.threads.iter().find(|t| t.tid == tid)?.cct.nodes.len());
        let codes = self.python_code.len() as u32;
        for thread in &self.threads {
            let nodes = thread.cct.nodes.iter();
            let missing =
                |n: &CctNode| matches!(n.frame, Frame::Python { code, .. } if code >= codes);
            if let Some(i) = nodes.clone().position(missing) {
                let tid = thread.tid;
                return Err(format!(
                    "node {i} of thread {tid} names a missing Python function"
                ));
            }
        }
        if let Some(why) = self.traces.malformation(nodes_of) {
            return Err(why);
        }
        self.watch.malformation().map_or(Ok(()), Err)
    }

    /// The file's bytes in the current format version: tagged sections.
    pub fn to_bytes(&self) -> Result<Vec<u8>, postcard::Error> {
        let parts = self.parts()?;
        let tagged: Vec<(u32, &[u8])> = (1..).zip(parts.iter().map(Vec::as_slice)).collect();
        PROFILE_FILE.encode_parts(&[&sections::join(&tagged)])
    }

    /// The file's sections in order, each encoded: section `i + 1` is `parts()[i]`. A file of
    /// an untagged format version `v` (2 to 8) holds the first `v` of them, one after the other.
    pub(crate) fn parts(&self) -> Result<Vec<Vec<u8>>, postcard::Error> {
        let sums: Vec<Option<u32>> = self.modules.iter().map(|m| m.checksum).collect();
        Ok(vec![
            postcard::to_stdvec(self)?,
            postcard::to_stdvec(&sums)?,
            postcard::to_stdvec(&self.data)?,
            postcard::to_stdvec(&self.data.memory_sources())?,
            postcard::to_stdvec(&self.job)?,
            postcard::to_stdvec(&self.traces)?,
            postcard::to_stdvec(&self.watch)?,
            postcard::to_stdvec(&self.data.traces)?,
            postcard::to_stdvec(&self.regions)?,
            postcard::to_stdvec(&self.read_with)?,
            postcard::to_stdvec(&self.python_code)?,
        ])
    }

    /// The bytes of this profile as a file of the older, untagged format `version` (2 to 8)
    /// writes it: its first `version` parts.
    #[cfg(test)]
    pub(crate) fn to_version(&self, version: u32) -> Vec<u8> {
        let parts = self.parts().unwrap();
        let refs: Vec<&[u8]> = parts[..version as usize]
            .iter()
            .map(Vec::as_slice)
            .collect();
        let kind = FileKind {
            version,
            ..PROFILE_FILE
        };
        kind.encode_parts(&refs).unwrap()
    }

    /// Read a `profile.db` file (see [`Profile::from_bytes`]).
    pub fn read(path: &Path) -> Result<Profile, DbError> {
        Profile::from_bytes(&read_file(path)?, path)
    }

    /// Write the profile to `path` atomically, replacing what is there (see
    /// [`crate::format::envelope::write_atomically`]). A failure (e.g. a full disk) leaves any existing
    /// file at `path` untouched.
    pub fn write(&self, path: &Path) -> Result<(), DbError> {
        let bytes = self.to_bytes().map_err(|e| PROFILE_FILE.corrupt(path, e))?;
        write_atomically(path, &bytes, Replace::Allowed)
    }
}

/// The first format version whose body is [tagged sections](crate::format::sections).
const TAGGED_SINCE: u32 = 9;

/// The highest section id this build knows: 1 the profile, 2 its modules' checksums, 3 the data
/// references, 4 their data sources, 5 the place in a job, 6 the traces, 7 the watch results,
/// 8 the data traces, 9 the OpenMP regions' timeline, 10 the event groups, 11 the Python
/// functions.
const LAST_SECTION: u32 = 11;

/// The sections of a profile as they are decoded, before they are put together.
#[derive(Default)]
struct Parts {
    profile: Option<Profile>,
    sums: Option<Vec<Option<u32>>>,
    data: Option<DataProfile>,
    sources: Option<MemorySources>,
    job: Option<JobPlace>,
    traces: Option<Traces>,
    watch: Option<WatchProfile>,
    data_traces: Option<Traces>,
    regions: Option<RegionTimeline>,
    read_with: Option<Vec<Option<u32>>>,
    python_code: Option<Vec<PythonCode>>,
}

impl Parts {
    /// Decode section `id` (1 to [`LAST_SECTION`]) from the front of `bytes`; returns the bytes
    /// after it.
    fn take<'b>(&mut self, id: u32, bytes: &'b [u8]) -> Result<&'b [u8], postcard::Error> {
        use sections::decode_into as put;
        match id {
            1 => put(&mut self.profile, bytes),
            2 => put(&mut self.sums, bytes),
            3 => put(&mut self.data, bytes),
            4 => put(&mut self.sources, bytes),
            5 => put(&mut self.job, bytes),
            6 => put(&mut self.traces, bytes),
            7 => put(&mut self.watch, bytes),
            8 => put(&mut self.data_traces, bytes),
            9 => put(&mut self.regions, bytes),
            10 => put(&mut self.read_with, bytes),
            _ => put(&mut self.python_code, bytes),
        }
    }

    /// The profile, each section in its place; why not when one it needs is missing (the
    /// profile; from format version 2 on, the modules' checksums) or they disagree.
    fn assemble(self, version: u32) -> Result<Profile, String> {
        let mut profile = self.profile.ok_or("section 1 (the profile) is missing")?;
        match self.sums {
            Some(sums) if sums.len() == profile.modules.len() => {
                for (module, sum) in profile.modules.iter_mut().zip(sums) {
                    module.checksum = sum;
                }
            }
            Some(sums) => {
                let (n, m) = (sums.len(), profile.modules.len());
                return Err(format!("{n} checksums for {m} modules"));
            }
            None if version >= 2 => {
                return Err("section 2 (the modules' checksums) is missing".into());
            }
            None => {}
        }
        if let Some(data) = self.data {
            profile.data = data;
        }
        if let Some(sources) = self.sources {
            profile.data.attach_sources(sources, profile.events.len())?;
        }
        profile.job = self.job.unwrap_or_default();
        profile.traces = self.traces.unwrap_or_default();
        profile.watch = self.watch.unwrap_or_default();
        profile.data.traces = self.data_traces.unwrap_or_default();
        profile.regions = self.regions.unwrap_or_default();
        profile.read_with = self.read_with.unwrap_or_default();
        profile.python_code = self.python_code.unwrap_or_default();
        let events = profile.events.len() as u32;
        if !profile.read_with.is_empty() && profile.read_with.len() != events as usize
            || (profile.read_with.iter().flatten()).any(|&leader| leader >= events)
        {
            return Err("the event groups (section 10) do not match the events".into());
        }
        Ok(profile)
    }
}

#[cfg(test)]
#[path = "db_tests.rs"]
pub(crate) mod tests;
