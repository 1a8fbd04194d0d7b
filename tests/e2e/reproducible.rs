//! The same inputs give the same database, byte for byte: hpcprof-rs with a cold structure
//! cache and a warm one, on 1 thread and on 16, without a cache, on a machine kept busy, and
//! hpcprof-rs-mpi on 2 and 3 ranks. The inputs: a measurement directory with a C++ program
//! measured with traces and data addresses, and a two-thread OpenMP program, so that modules,
//! threads, traces and the data section are all in the bytes compared.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::parallel_jobs::have_mpi;
use crate::parallel_jobs_mpi::hpcprof_mpi;
use crate::support::{compile, run, run_ok, scratch_dir, tool_command};

/// `hpcprof-rs m -o OUT ARGS` in `dir` with the structure cache `cache`.
fn serial(dir: &Path, cache: &Path, out: &str, args: &[&str]) -> Vec<u8> {
    run_ok(
        tool_command("hpcprof-rs")
            .args(["m", "-o", out])
            .args(args)
            .env("XDG_CACHE_HOME", cache)
            .current_dir(dir),
    );
    std::fs::read(dir.join(out)).unwrap()
}

/// `hpcprof-rs-mpi m -o OUT` on `ranks` ranks in `dir` with the structure cache `cache`.
fn parallel(dir: &Path, cache: &Path, out: &str, ranks: u32) -> Vec<u8> {
    let output = run(Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-np"])
        .arg(ranks.to_string())
        .arg(hpcprof_mpi())
        .args(["m", "-o", out])
        .env("XDG_CACHE_HOME", cache)
        .current_dir(dir));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::read(dir.join(out)).unwrap()
}

#[test]
fn the_same_inputs_give_the_same_bytes_cold_or_warm_serial_or_parallel() {
    let dir = scratch_dir("reproducible");
    compile("stlmap.cc", &dir, "stlmap", &["-O2", "-g"]);
    compile("par_omp.c", &dir, "omp", &["-O1", "-g", "-fopenmp"]);
    std::fs::create_dir(dir.join("m")).unwrap();
    for (out, command) in [("m/stlmap.db", "./stlmap 200000"), ("m/omp.db", "./omp")] {
        run_ok(
            tool_command("hpcrun-rs")
                .args(["-q", "-t", "--data", "-e", "cpu-clock@f2000", "-o", out])
                .args(command.split(' '))
                .env("OMP_WAIT_POLICY", "passive")
                .current_dir(&dir),
        );
    }
    let (cache, other) = (dir.join("cache"), dir.join("cache2"));
    let cold = serial(&dir, &cache, "cold.hpcdb", &["-j", "1"]);
    assert!(cold.len() > 10_000, "a database of {} bytes", cold.len());
    let warm = serial(&dir, &cache, "warm.hpcdb", &["-j", "16"]);
    assert!(
        cold == warm,
        "cold and warm cache (1 and 16 threads) differ"
    );
    let none = serial(&dir, &other, "none.hpcdb", &["-j", "4", "--no-cache"]);
    assert!(cold == none, "with and without a cache differ");
    // A busy machine: a process spinning on each core while hpcprof-rs runs.
    let spinners: Vec<_> = (0..2)
        .map(|_| {
            Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let busy = serial(&dir, &cache, "busy.hpcdb", &[]);
    for mut spinner in spinners {
        let _ = spinner.kill();
        let _ = spinner.wait();
    }
    assert!(cold == busy, "a busy machine's database differs");
    if !have_mpi() {
        return;
    }
    let (mpi_cache, mpi_warm) = (dir.join("mpi-cache"), dir.join("cache"));
    for (ranks, cache) in [(2, &mpi_cache), (3, &mpi_warm)] {
        let out = format!("mpi{ranks}.hpcdb");
        let bytes = parallel(&dir, cache, &out, ranks);
        assert!(cold == bytes, "hpcprof-rs-mpi on {ranks} ranks differs");
    }
}
