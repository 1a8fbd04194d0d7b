//! A burst of short threads: every thread is seen and none of their samples is lost, though
//! the command keeps both cores busy with hundreds of runnable threads.

use crate::hpcrun::{hpcrun, is_root, CFLAGS};
use crate::support::symbols::Namer;
use crate::support::{compile, scratch_dir};
use profiler::db::Profile;

const THREADS: usize = 400;

#[test]
fn a_burst_of_short_threads_loses_no_samples() {
    let dir = scratch_dir("hpcrun-burst");
    let mut flags = CFLAGS.to_vec();
    flags.push("-pthread");
    let exe = compile("run_burst.c", &dir, "run_burst", &flags);
    let db = dir.join("burst.db");
    let threads = THREADS.to_string();
    let exe_s = exe.to_str().unwrap();
    let (status, stderr) = hpcrun(&db, &["-e", "cpu-clock@f1000", exe_s, "2000000", &threads]);
    assert_eq!(status, 0, "{stderr}");
    let profile = Profile::read(&db).unwrap();
    if !is_root() {
        // Without the reader's real-time priority a loss is possible; it must be said.
        assert!(
            profile.stats.lost == 0 || stderr.contains("records were lost"),
            "{stderr}"
        );
        return;
    }
    assert_eq!(profile.stats.lost, 0, "{stderr}");
    assert_eq!(profile.threads.len(), THREADS + 1, "{stderr}");
    // Each worker runs a few milliseconds at 1 kHz: a few samples each, most in `work` (the
    // rest in creating and ending 400 threads, a larger share on a loaded machine: 87% was
    // seen under a concurrent build).
    let mut namer = Namer::new(&profile);
    let in_work: u64 = profile
        .threads
        .iter()
        .flat_map(|t| namer.paths(&t.cct))
        .filter(|(path, _)| path.last().is_some_and(|leaf| leaf.ends_with(":work")))
        .map(|(_, n)| n)
        .sum();
    assert!(
        in_work >= 2 * THREADS as u64 && in_work * 4 >= profile.stats.samples * 3,
        "{in_work} of {} samples in work: {stderr}",
        profile.stats.samples
    );
}
