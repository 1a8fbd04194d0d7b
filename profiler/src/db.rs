//! The `profile.db` format: what one `hpcrun-rs` run measured.
//!
//! A file is an 8-byte magic, a little-endian `u32` format version, then one [`Profile`] encoded
//! with postcard. It is the contract between `hpcrun-rs` (writer) and `hpcprof-rs` (reader):
//! every address in it is module-relative at link time ([`Svma`]), so the correlator never needs
//! to know where a module was loaded.

use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::addr::Svma;

/// The first bytes of every `profile.db`.
pub const MAGIC: [u8; 8] = *b"HPCRUNRS";
/// The format version this build writes and reads.
pub const VERSION: u32 = 1;

/// Index of a module in [`Profile::modules`].
pub type ModuleId = u32;
/// Index of a node in [`Cct::nodes`]; node 0 is the thread's root.
pub type NodeId = u32;

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
}

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

/// A load module: an executable, a shared library, or a kernel-provided image such as `[vdso]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModuleInfo {
    /// Path of the file as mapped (or a name in brackets such as `[vdso]`).
    pub path: String,
    /// GNU build-id, when the file has one.
    pub build_id: Option<Vec<u8>>,
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

/// A calling-context tree: nodes in insertion order, each pointing at its parent.
///
/// Node 0 is the root. Costs are exclusive (what was sampled exactly at that node); inclusive
/// costs are sums over subtrees and are computed by the correlator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cct {
    /// The nodes; `nodes[0]` is the root.
    pub nodes: Vec<CctNode>,
}

/// One calling context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CctNode {
    /// Parent node (the root is its own parent).
    pub parent: NodeId,
    /// What this node stands for.
    pub frame: Frame,
    /// Exclusive cost per event, parallel to [`Profile::events`].
    pub costs: Vec<Cost>,
}

/// Samples and their summed periods for one event at one node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cost {
    /// Number of samples.
    pub samples: u64,
    /// Sum of the samples' periods, in the event's unit.
    pub value: u64,
}

/// What a calling-context node stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Frame {
    /// The thread's root.
    Root,
    /// The `<partial call paths>` root: paths below it could not be unwound to the thread's root.
    Partial,
    /// An address in a known module. `kind` tells whether it was sampled or is a return address.
    Code {
        /// The module.
        module: ModuleId,
        /// Link-time address in the module's file.
        addr: Svma,
        /// Sampled instruction pointer or return address.
        kind: AddrKind,
    },
    /// An address in no known module (JIT code, an unmapped page): the runtime address.
    Unmapped {
        /// Runtime address in the process.
        avma: u64,
        /// Sampled instruction pointer or return address.
        kind: AddrKind,
    },
    /// Time spent in the kernel on behalf of the user context above it.
    Kernel,
}

/// Whether a frame address is the sampled instruction or a return address.
///
/// The correlator looks up `ra - 1` for return addresses so that a call that ends a function
/// is attributed to the call, not to whatever follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AddrKind {
    /// The interrupted instruction (the leaf of a path).
    Ip,
    /// A return address (every interior frame).
    Return,
}

impl Cct {
    /// A tree holding only its root.
    pub fn new(events: usize) -> Self {
        Cct {
            nodes: vec![CctNode {
                parent: 0,
                frame: Frame::Root,
                costs: vec![Cost::default(); events],
            }],
        }
    }

    /// Children of every node, in node order (built on demand; the file stores parents only).
    pub fn children(&self) -> Vec<Vec<NodeId>> {
        let mut children = vec![Vec::new(); self.nodes.len()];
        for (i, node) in self.nodes.iter().enumerate().skip(1) {
            children[node.parent as usize].push(i as NodeId);
        }
        children
    }

    /// Total cost of event `event` over the whole tree.
    pub fn total(&self, event: usize) -> Cost {
        self.nodes.iter().fold(Cost::default(), |acc, n| {
            let c = n.costs.get(event).copied().unwrap_or_default();
            Cost {
                samples: acc.samples + c.samples,
                value: acc.value + c.value,
            }
        })
    }
}

/// Why a `profile.db` could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The file does not start with the `profile.db` magic.
    #[error("{path}: not a profile.db written by hpcrun-rs (bad magic)")]
    BadMagic {
        /// The file.
        path: PathBuf,
    },
    /// The file was written by another version of the format.
    #[error("{path}: profile.db format version {found}, this build reads version {expected}")]
    Version {
        /// The file.
        path: PathBuf,
        /// Version in the file.
        found: u32,
        /// Version this build reads.
        expected: u32,
    },
    /// The body could not be decoded (truncated or corrupt file).
    #[error("{path}: truncated or corrupt profile.db ({source})")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The decoder's complaint.
        source: postcard::Error,
    },
}

impl Profile {
    /// Encode the profile into bytes (header + body).
    pub fn to_bytes(&self) -> Result<Vec<u8>, postcard::Error> {
        let mut out = Vec::with_capacity(4096);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        postcard::to_extend(self, out)
    }

    /// Decode a profile from bytes; `path` is only used to name the file in errors.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Profile, DbError> {
        let path_buf = || path.to_path_buf();
        if bytes.len() < 12 || bytes[..8] != MAGIC {
            return Err(DbError::BadMagic { path: path_buf() });
        }
        let found = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if found != VERSION {
            return Err(DbError::Version {
                path: path_buf(),
                found,
                expected: VERSION,
            });
        }
        postcard::from_bytes(&bytes[12..]).map_err(|source| DbError::Corrupt {
            path: path_buf(),
            source,
        })
    }

    /// Read a `profile.db` file.
    pub fn read(path: &Path) -> Result<Profile, DbError> {
        let io_err = |source| DbError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut bytes = Vec::new();
        File::open(path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(io_err)?;
        Profile::from_bytes(&bytes, path)
    }

    /// Write the profile to `path` atomically: a temporary file beside it, synced, then renamed.
    /// A failure (e.g. a full disk) leaves any existing file at `path` untouched.
    pub fn write(&self, path: &Path) -> Result<(), DbError> {
        let io_err = |source| DbError::Io {
            path: path.to_path_buf(),
            source,
        };
        let bytes = self.to_bytes().map_err(|source| DbError::Corrupt {
            path: path.to_path_buf(),
            source,
        })?;
        let tmp = tmp_path(path);
        let result = (|| {
            let mut w = BufWriter::new(File::create(&tmp)?);
            w.write_all(&bytes)?;
            let f = w.into_inner().map_err(|e| e.into_error())?;
            f.sync_all()?;
            fs::rename(&tmp, path)
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result.map_err(io_err)
    }
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}
