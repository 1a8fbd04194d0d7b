//! The OpenMP regions' timeline of a launched command: hpcrun-rs names its OpenMP tool
//! (`libhpcrun_ompt.so`, crate `hpcrun-ompt`, built with the workspace and found beside the
//! running executable) in `OMP_TOOL_LIBRARIES` and hands it a memfd to append its records to
//! (format: [`hpcrun_alloc_format::ompt`]); after the run [`RegionLog::finish`] reads them into a
//! [`RegionTimeline`]. Runtimes with the OpenMP tools interface (LLVM's `libomp`, Intel's
//! `libiomp5`) load the tool; GCC's `libgomp` has none, and a program without OpenMP never
//! loads it. The user's own `OMP_TOOL_LIBRARIES` is left alone (their tool runs, ours not), as
//! is `OMP_TOOL=disabled` (the runtime then loads no tool).

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

use hpcrun_alloc_format::ompt::{
    ChunkHeader, Record, CHUNK_HEADER_BYTES, CHUNK_MAGIC, ENV_FD, PARALLEL_BEGIN, PARALLEL_END,
    RECORD_BYTES, TASK_BEGIN, TASK_END,
};

use crate::format::openmp::{Region, RegionTimeline, TaskSpan};
use crate::sampler::capture::launch::beside_exe;

/// File name of the OpenMP tool.
const TOOL_NAME: &str = "libhpcrun_ompt.so";

/// Where the OpenMP tool of a launched command writes.
pub(crate) struct RegionLog {
    file: File,
    tool: PathBuf,
}

impl RegionLog {
    /// A log for a command about to be launched; `None` where the tool is not beside
    /// hpcrun-rs, the user names OpenMP tools of their own, or no memfd can be made.
    pub(crate) fn new() -> Option<RegionLog> {
        if std::env::var_os("OMP_TOOL_LIBRARIES").is_some_and(|v| !v.is_empty()) {
            return None;
        }
        let tool = beside_exe(&std::env::current_exe().ok()?, TOOL_NAME)?;
        // SAFETY: memfd_create takes a NUL-terminated name; the descriptor it returns is new.
        let fd = unsafe { libc::memfd_create(c"hpcrun-ompt".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` is a new descriptor nothing else owns.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        Some(RegionLog { file, tool })
    }

    /// The variables that make the command's OpenMP runtime load the tool.
    pub(crate) fn child_env(&self) -> Vec<(OsString, OsString)> {
        use std::os::fd::AsRawFd;
        vec![
            ("OMP_TOOL_LIBRARIES".into(), self.tool.clone().into()),
            (ENV_FD.into(), self.file.as_raw_fd().to_string().into()),
        ]
    }

    /// The descriptor the command must inherit.
    pub(crate) fn fd_to_keep(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// Everything the tool wrote, once the command (and every process it started) is done.
    pub(crate) fn finish(mut self) -> RegionTimeline {
        let mut bytes = Vec::new();
        let read =
            (self.file.seek(SeekFrom::Start(0))).and_then(|_| self.file.read_to_end(&mut bytes));
        match read {
            Ok(_) => timeline(&bytes),
            Err(_) => RegionTimeline::default(),
        }
    }
}

/// The timeline in the tool's chunks: regions made unique across processes (a forked child
/// numbers its regions on from its parent's), each begin paired with its end on its thread.
/// A chunk cut short (or not one) ends the reading; its records are counted lost.
pub(crate) fn timeline(mut bytes: &[u8]) -> RegionTimeline {
    let mut out = RegionTimeline::default();
    let mut ids: HashMap<(u32, u64), u64> = HashMap::new();
    let mut open: HashMap<(u32, u64), usize> = HashMap::new();
    let mut tasks_open: HashMap<u32, Vec<usize>> = HashMap::new();
    while let Some(header) = ChunkHeader::from_bytes(bytes) {
        let body = CHUNK_HEADER_BYTES + header.count as usize * RECORD_BYTES;
        if header.magic != CHUNK_MAGIC || bytes.len() < body {
            // What is left cannot be read: its records are lost (at least one).
            out.lost += u64::from(header.count).max(1);
            break;
        }
        out.lost += u64::from(header.lost);
        let records = bytes[CHUNK_HEADER_BYTES..body].chunks_exact(RECORD_BYTES);
        for r in records.filter_map(Record::from_bytes) {
            let next = ids.len() as u64 + 1;
            let mut id =
                |raw: u64| (raw != 0).then(|| *ids.entry((header.pid, raw)).or_insert(next));
            match r.kind {
                PARALLEL_BEGIN => {
                    let (Some(region), enclosing) = (id(r.region), r.other) else {
                        continue;
                    };
                    let enclosing = (enclosing != 0)
                        .then(|| ids.get(&(header.pid, enclosing)).copied())
                        .flatten()
                        .unwrap_or(0);
                    open.insert((header.pid, region), out.regions.len());
                    out.regions.push(Region {
                        id: region,
                        enclosing,
                        thread: header.tid,
                        begin: r.time,
                        end: u64::MAX,
                        codeptr: r.codeptr,
                    });
                }
                PARALLEL_END => {
                    let region = ids.get(&(header.pid, r.region)).copied();
                    if let Some(i) = region.and_then(|id| open.remove(&(header.pid, id))) {
                        out.regions[i].end = r.time;
                    }
                }
                TASK_BEGIN => {
                    let Some(region) = id(r.region) else { continue };
                    tasks_open
                        .entry(header.tid)
                        .or_default()
                        .push(out.tasks.len());
                    out.tasks.push(TaskSpan {
                        thread: header.tid,
                        region,
                        begin: r.time,
                        end: u64::MAX,
                    });
                }
                TASK_END => {
                    let stack = tasks_open.entry(header.tid).or_default();
                    if let Some(i) = stack.pop() {
                        out.tasks[i].end = r.time;
                    }
                }
                _ => {}
            }
        }
        bytes = &bytes[body..];
    }
    out.regions.sort_by_key(|r| r.id);
    out.tasks.sort_by_key(|s| (s.thread, s.begin));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(pid: u32, tid: u32, records: &[(u32, u64, u64, u64)]) -> Vec<u8> {
        let header = ChunkHeader {
            magic: CHUNK_MAGIC,
            pid,
            tid,
            count: records.len() as u32,
            lost: 0,
        };
        let mut b = header.to_bytes().to_vec();
        for &(kind, time, region, other) in records {
            let r = Record {
                kind,
                index: 0,
                time,
                region,
                other,
                codeptr: 0,
            };
            b.extend_from_slice(&r.to_bytes());
        }
        b
    }

    #[test]
    fn begins_pair_with_ends_and_processes_keep_their_regions_apart() {
        let mut bytes = chunk(
            7,
            70,
            &[
                (PARALLEL_BEGIN, 10, 1, 0),
                (TASK_BEGIN, 11, 1, 0),
                (TASK_END, 19, 1, 0),
                (PARALLEL_END, 20, 1, 0),
            ],
        );
        bytes.extend(chunk(
            7,
            71,
            &[(TASK_BEGIN, 12, 1, 0), (TASK_END, 18, 1, 0)],
        ));
        // A forked child numbers its region 1 too, nested in nothing; one more begun, cut short.
        bytes.extend(chunk(
            8,
            80,
            &[(PARALLEL_BEGIN, 30, 1, 0), (TASK_BEGIN, 31, 1, 0)],
        ));
        bytes.extend(&chunk(8, 80, &[(TASK_END, 40, 1, 0)])[..30]);
        let t = timeline(&bytes);
        let r: Vec<_> = t
            .regions
            .iter()
            .map(|r| (r.id, r.thread, r.begin, r.end))
            .collect();
        assert_eq!(r, [(1, 70, 10, 20), (2, 80, 30, u64::MAX)]);
        let s: Vec<_> = t
            .tasks
            .iter()
            .map(|s| (s.thread, s.region, s.begin, s.end))
            .collect();
        assert_eq!(s, [(70, 1, 11, 19), (71, 1, 12, 18), (80, 2, 31, u64::MAX)]);
        assert_eq!(t.lost, 1, "the chunk cut short");
        assert_eq!(t.outermost_at(71, 15).map(|r| r.thread), Some(70));
    }

    #[test]
    fn a_nested_region_knows_the_one_around_it() {
        let bytes = chunk(
            7,
            70,
            &[
                (PARALLEL_BEGIN, 10, 5, 0),
                (TASK_BEGIN, 11, 5, 0),
                (PARALLEL_BEGIN, 12, 6, 5),
                (TASK_BEGIN, 13, 6, 0),
                (TASK_END, 14, 6, 0),
                (PARALLEL_END, 15, 6, 0),
                (TASK_END, 16, 5, 0),
                (PARALLEL_END, 17, 5, 0),
            ],
        );
        let t = timeline(&bytes);
        let r: Vec<_> = t.regions.iter().map(|r| (r.id, r.enclosing)).collect();
        assert_eq!(r, [(1, 0), (2, 1)]);
        assert_eq!(t.outermost_at(70, 13).map(|r| r.id), Some(1));
    }
}
