//! Which load modules are OpenMP runtimes. A program that maps one is traced by the recorder
//! (every sample's time and context, as `-t` does) so that the correlator can graft its
//! worker threads' samples under the parallel regions that ran them, by time where one
//! outlined function is entered from several calling contexts. Where the runtime has the
//! OpenMP tools interface (LLVM's `libomp`, Intel's `libiomp5`), hpcrun-rs's tool records when
//! each region and each thread's share of it began and ended ([`RegionTimeline`]), so that
//! grafting knows which region a worker's sample belongs to.

use serde::{Deserialize, Serialize};

/// When each parallel region ran and each thread's implicit task of it, as the OpenMP tool
/// recorded them (empty where the runtime has no tools interface, or the run was not
/// launched by hpcrun-rs). Times are CLOCK_MONOTONIC ns, the samples' clock.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionTimeline {
    /// Every region, by id.
    pub regions: Vec<Region>,
    /// Every thread's implicit tasks, by thread then begin time.
    pub tasks: Vec<TaskSpan>,
    /// Records the tool could not write (their regions or tasks are missing).
    pub lost: u64,
}

/// One parallel region, from its begin to its end on the thread that encountered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    /// Unique in the timeline, never 0.
    pub id: u64,
    /// The region this one is nested in (0: none): the region of the encountering thread's
    /// implicit task.
    pub enclosing: u64,
    /// The thread that encountered it: its tid in `profile.db`, its thread index in a
    /// database (as [`crate::trace::ThreadTrace::thread`]).
    pub thread: u32,
    /// When the region began and ended (`u64::MAX`: its end was not recorded).
    pub begin: u64,
    /// See [`Region::begin`].
    pub end: u64,
    /// The return address of the program's call that started the region (0: not known): the
    /// same for every instance of one region entered from one place.
    pub codeptr: u64,
}

/// One thread's implicit task of a region: its share of the region's work and its waiting at
/// the region's barriers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSpan {
    /// The thread (as [`Region::thread`]).
    pub thread: u32,
    /// The region's id.
    pub region: u64,
    /// When the task began and ended (`u64::MAX`: its end was not recorded).
    pub begin: u64,
    /// See [`TaskSpan::begin`].
    pub end: u64,
}

impl RegionTimeline {
    /// Whether the tool recorded nothing.
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty() && self.tasks.is_empty()
    }

    /// Add `other`'s regions and tasks, their threads renamed by `thread` (`None`: the thread
    /// is not kept, nor what it recorded) and their region ids made unique beside ours.
    pub fn extend_from(&mut self, other: &RegionTimeline, thread: impl Fn(u32) -> Option<u32>) {
        if other.is_empty() && other.lost == 0 {
            // Most profiles (no OpenMP tool): nothing to add, and nothing to sort again.
            return;
        }
        let base = self.regions.iter().map(|r| r.id).max().unwrap_or(0);
        let id = |i: u64| if i == 0 { 0 } else { base + i };
        for r in &other.regions {
            if let Some(t) = thread(r.thread) {
                self.regions.push(Region {
                    id: id(r.id),
                    enclosing: id(r.enclosing),
                    thread: t,
                    ..*r
                });
            }
        }
        for s in &other.tasks {
            if let Some(t) = thread(s.thread) {
                self.tasks.push(TaskSpan {
                    thread: t,
                    region: id(s.region),
                    ..*s
                });
            }
        }
        self.lost += other.lost;
        self.regions.sort_by_key(|r| r.id);
        self.tasks.sort_by_key(|s| (s.thread, s.begin));
    }

    /// The outermost region around the time `time` of thread `thread`: the region of the
    /// innermost implicit task the thread was running then, and of the regions it is nested
    /// in the first; `None` when the thread ran no task then.
    pub fn outermost_at(&self, thread: u32, time: u64) -> Option<&Region> {
        let from = self.tasks.partition_point(|s| s.thread < thread);
        let upto = self
            .tasks
            .partition_point(|s| (s.thread, s.begin) <= (thread, time));
        let task = self.tasks[from..upto].iter().rev().find(|s| time < s.end)?;
        let mut region = self.region(task.region)?;
        // Each step goes to a region begun earlier; the bound guards against a cycle.
        for _ in 0..self.regions.len() {
            match self.region(region.enclosing) {
                Some(outer) => region = outer,
                None => break,
            }
        }
        Some(region)
    }

    /// The region of id `id`.
    fn region(&self, id: u64) -> Option<&Region> {
        let i = self.regions.binary_search_by_key(&id, |r| r.id).ok()?;
        self.regions.get(i)
    }
}

/// Whether the module at `path` is an OpenMP runtime: GCC's `libgomp`, LLVM's `libomp` or
/// Intel's `libiomp5`, judged by the file name.
pub fn is_runtime(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    ["libgomp.so", "libgomp-", "libomp.so", "libiomp5.so"]
        .iter()
        .any(|p| name.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtimes_are_known_by_their_file_names() {
        assert!(is_runtime("/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0"));
        assert!(is_runtime("/usr/lib/llvm-14/lib/libomp.so.5"));
        assert!(is_runtime("/opt/intel/lib/libiomp5.so"));
        assert!(!is_runtime("/usr/lib/x86_64-linux-gnu/libompitrace.so.40"));
        assert!(!is_runtime("/home/u/libgomp_wrapper_test"));
        assert!(!is_runtime("/usr/lib/libc.so.6"));
    }

    fn timeline() -> RegionTimeline {
        let region = |id, enclosing, thread, begin, end| Region {
            id,
            enclosing,
            thread,
            begin,
            end,
            codeptr: 0x401000,
        };
        let task = |thread, region, begin, end| TaskSpan {
            thread,
            region,
            begin,
            end,
        };
        RegionTimeline {
            // Region 1 (thread 10, 100-200) holds region 2, begun by its worker 11 (120-150).
            regions: vec![region(1, 0, 10, 100, 200), region(2, 1, 11, 120, 150)],
            tasks: vec![
                task(10, 1, 100, 200),
                task(11, 1, 101, 199),
                task(11, 2, 120, 150),
                task(12, 2, 121, 149),
            ],
            lost: 0,
        }
    }

    #[test]
    fn a_threads_time_belongs_to_the_outermost_region_of_its_task() {
        let t = timeline();
        assert_eq!(t.outermost_at(11, 130).map(|r| r.id), Some(1));
        assert_eq!(t.outermost_at(12, 130).map(|r| r.id), Some(1));
        assert_eq!(t.outermost_at(11, 160).map(|r| r.id), Some(1));
        assert_eq!(t.outermost_at(12, 160), None, "after its task");
        assert_eq!(t.outermost_at(10, 99), None, "before the region");
        assert_eq!(t.outermost_at(13, 130), None, "a thread without tasks");
    }

    #[test]
    fn timelines_of_several_profiles_keep_their_regions_apart() {
        let mut all = timeline();
        all.extend_from(&timeline(), |t| (t != 12).then_some(t + 100));
        assert_eq!(all.regions.len(), 4);
        assert_eq!(all.tasks.len(), 7, "thread 12's task is left out");
        let nested = all.regions.iter().find(|r| r.thread == 111).unwrap();
        assert_eq!((nested.id, nested.enclosing), (4, 3));
        assert_eq!(all.outermost_at(111, 130).map(|r| r.thread), Some(110));
    }
}
