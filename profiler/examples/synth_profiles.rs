//! Write N synthetic profiles derived from one real profile, as the ranks of a job would write
//! them: the input of `scripts/bench-scale`, which times hpcprof-rs and `hpcview-rs --stats`
//! on growing numbers of profiles.
//!
//! Copy `i` gets rank `i`, its own start time (so hpcprof-rs does not take two copies for one
//! measurement given twice), shifted process and thread ids, every cost scaled by `1 + i / N`
//! (the last rank does about twice the first's work) times a fixed pseudo-random factor in
//! [0.9, 1.1] per node: the same contexts everywhere, as in an SPMD program, with imbalance.
//!
//! ```text
//! cargo build --release -p profiler --example synth_profiles
//! target/release/examples/synth_profiles PROFILE.db N DIR
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use profiler::db::{Cost, Profile};
use profiler::job::JobPlace;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [profile, count, dir] = args.as_slice() else {
        eprintln!("usage: synth_profiles PROFILE.db N DIR");
        return ExitCode::from(2);
    };
    let Ok(count) = count.parse::<u32>() else {
        eprintln!("synth_profiles: N must be a number, not {count}");
        return ExitCode::from(2);
    };
    match write_copies(Path::new(profile), count, Path::new(dir)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("synth_profiles: {e}");
            ExitCode::from(1)
        }
    }
}

/// Write `count` perturbed copies of the profile at `path` into `dir` (which must exist).
fn write_copies(path: &Path, count: u32, dir: &Path) -> Result<(), profiler::db::DbError> {
    let base = Profile::read(path)?;
    for rank in 0..count {
        let copy = perturbed(&base, rank, count);
        let name: PathBuf = dir.join(format!("synth-{rank:06}-{}-{}.db", copy.host, 1000 + rank));
        copy.write(&name)?;
    }
    Ok(())
}

/// Copy `rank` of `count` (see the module documentation).
fn perturbed(base: &Profile, rank: u32, count: u32) -> Profile {
    let mut p = base.clone();
    let shift = (rank + 1).wrapping_mul(1_000_000);
    p.start_ns += u64::from(rank);
    p.job = JobPlace {
        rank: Some(rank),
        job: Some("synthetic".into()),
    };
    for process in &mut p.processes {
        process.pid = process.pid.wrapping_add(shift);
        process.ppid = process.ppid.wrapping_add(shift);
    }
    let scale = 1.0 + f64::from(rank) / f64::from(count.max(1));
    for thread in &mut p.threads {
        thread.pid = thread.pid.wrapping_add(shift);
        thread.tid = thread.tid.wrapping_add(shift);
        for (i, node) in thread.cct.nodes.iter_mut().enumerate() {
            let factor = scale * (0.9 + 0.2 * unit_noise(rank, i as u64));
            for cost in &mut node.costs {
                *cost = scaled(*cost, factor);
            }
        }
    }
    p
}

/// `cost` with samples and value multiplied by `factor` (rounded).
fn scaled(cost: Cost, factor: f64) -> Cost {
    Cost {
        samples: (cost.samples as f64 * factor).round() as u64,
        value: (cost.value as f64 * factor).round() as u64,
    }
}

/// A fixed pseudo-random number in [0, 1) for (rank, node): splitmix64 of both.
fn unit_noise(rank: u32, node: u64) -> f64 {
    let mut z = (u64::from(rank) << 32 ^ node).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}
