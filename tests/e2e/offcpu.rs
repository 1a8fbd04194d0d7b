//! Off-CPU time (`hpcrun-rs --off-cpu`): every switch of a thread away from the CPU is sampled
//! with its calling context and weighed by the time until the thread ran again. The fixture's
//! threads block three ways (a pipe, a condition variable, a sleep), each timed by the
//! program's own monotonic clock: the oracle for each blocking path's off-CPU time; the
//! kernel's call chain at each switch says why (I/O, a lock, a sleep, a preemption). Kernel
//! sampling is needed (a switch happens in the kernel): as an ordinary user, a clear refusal.

use serde_json::Value;

use crate::hpcrun::is_root;
use crate::support::{
    as_user, compile, run, run_ok, scratch_dir, tool_command, work_clocks, world_dir, NOBODY,
};

/// The inclusive cost of metric `m` summed over the nodes named `name` under `node`.
fn inclusive(node: &Value, name: &str, m: usize) -> f64 {
    if node["name"] == name {
        return node["incl"][m].as_f64().unwrap_or(0.0);
    }
    (node["children"].as_array().into_iter().flatten())
        .map(|c| inclusive(c, name, m))
        .sum()
}

/// The inclusive cost of metric `m` of the nodes named `inner` below the nodes named `outer`.
fn inclusive_below(node: &Value, outer: &str, inner: &str, m: usize) -> f64 {
    if node["name"] == outer {
        return inclusive(node, inner, m);
    }
    (node["children"].as_array().into_iter().flatten())
        .map(|c| inclusive_below(c, outer, inner, m))
        .sum()
}

#[test]
fn blocked_time_goes_to_each_blocking_path_as_the_clocks_say() {
    if !is_root() {
        eprintln!("skipped: off-cpu needs kernel sampling (root here)");
        return;
    }
    let dir = scratch_dir("offcpu_paths");
    compile("offcpu_block.c", &dir, "ob", &["-O2", "-g", "-pthread"]);
    let stdout = run_ok(
        tool_command("hpcrun-rs")
            .args(["-q", "-e", "cpu-clock", "--off-cpu", "-o", "ob.db", "./ob"])
            .current_dir(&dir),
    );
    run_ok(tool_command("hpcprof-rs").arg("ob.db").current_dir(&dir));
    let view: Value = serde_json::from_str(&run_ok(
        tool_command("hpcview-rs")
            .args(["ob.hpcdb", "--json", "--threshold", "0"])
            .current_dir(&dir),
    ))
    .unwrap();
    let metrics = view["metrics"].as_array().unwrap();
    assert_eq!(metrics[0]["name"], "cpu-clock");
    assert_eq!(metrics[1]["name"], "off-cpu");
    assert_eq!(metrics[1]["unit"], "ns");
    let total = metrics[1]["total"].as_f64().unwrap();
    // Wall time: CPU plus off-CPU time, per context and in all.
    assert_eq!(metrics[2]["name"], "wall");
    let cpu = metrics[0]["total"].as_f64().unwrap();
    assert_eq!(metrics[2]["total"].as_f64().unwrap(), cpu + total);
    for way in ["wait_pipe", "compute"] {
        let parts = inclusive(&view["root"], way, 0) + inclusive(&view["root"], way, 1);
        assert_eq!(inclusive(&view["root"], way, 2), parts, "{way}");
    }
    // Every switch unwound to the thread's root: nothing under <partial call paths>.
    let partial = inclusive(&view["root"], "<partial call paths>", 1);
    assert!(partial <= 0.001 * total, "{partial} of {total} partial");
    // The blocking clocks are printed as `WAY block-ns N`, the CPU clocks over the same waits
    // as `WAY wait-cpu-ns N`; work_clocks reads `WHO work-cpu-ns`.
    let only = |kind: &str| -> String {
        let lines = stdout.lines().filter(|l| l.contains(kind));
        lines
            .collect::<Vec<_>>()
            .join("\n")
            .replace(kind, " work-cpu-ns ")
    };
    let clocks = work_clocks(&only(" block-ns "));
    let wait_cpu = work_clocks(&only(" wait-cpu-ns "));
    for way in ["wait_pipe", "wait_cond", "wait_sleep"] {
        let want = clocks[way] * 1e9;
        let got = inclusive(&view["root"], way, 1);
        assert!(
            (got - want).abs() <= 0.02 * want,
            "{way}: {:.1} ms off the CPU, its clock says {:.1} ms blocked",
            got / 1e6,
            want / 1e6
        );
        // The CPU time within the waits (locking, system calls, switching back in) is what the
        // thread's own clock measured over them, give or take sampling (a sample a millisecond):
        // the computing between the waits is not in it. A loaded machine makes more of it (a
        // condition already signalled while the thread was preempted, contended locks).
        let cpu_want = wait_cpu[way] * 1e9;
        let cpu_got = inclusive(&view["root"], way, 0);
        assert!(
            (cpu_got - cpu_want).abs() <= 0.25 * cpu_want + 5e6,
            "{way}: {:.1} ms of CPU time sampled in the waits, the thread's clock says {:.1} ms",
            cpu_got / 1e6,
            cpu_want / 1e6
        );
        // Why, as the kernel's call chain at each switch says.
        let reason = match way {
            "wait_pipe" => "<off-cpu: I/O>",
            "wait_cond" => "<off-cpu: lock>",
            _ => "<off-cpu: sleep>",
        };
        // A loaded machine also takes the CPU away from the thread between its waits
        // (preemption, a reason of its own; fresh run 40: 11% of the pipe's time): that and the
        // wait's own reason make up the time, and the wait's reason most of it.
        let why = inclusive_below(&view["root"], way, reason, 1);
        let preempted = inclusive_below(&view["root"], way, "<off-cpu: preempted>", 1);
        assert!(
            why + preempted >= 0.97 * got && why >= 0.5 * got,
            "{way}: {:.1} of its {:.1} ms off the CPU under {reason}, {:.1} preempted",
            why / 1e6,
            got / 1e6,
            preempted / 1e6
        );
    }
    // The computing thread's time off the CPU, if any, is preemption.
    let away = inclusive(&view["root"], "compute", 1);
    let preempted = inclusive_below(&view["root"], "compute", "<off-cpu: preempted>", 1);
    assert!(
        preempted >= 0.9 * away,
        "compute: {:.1} of {:.1} ms off the CPU preempted",
        preempted / 1e6,
        away / 1e6
    );
}

#[test]
fn off_cpu_is_refused_clearly_where_kernel_sampling_is_not_allowed() {
    if !is_root() {
        eprintln!("skipped: needs root to run as nobody");
        return;
    }
    let (dir, hpcrun) = world_dir("offcpu_nobody");
    compile("offcpu_block.c", &dir, "ob", &["-O2", "-g", "-pthread"]);
    let out = run(as_user(NOBODY, &hpcrun)
        .args(["--off-cpu", "-o"])
        .arg(dir.join("x.db"))
        .arg(dir.join("ob"))
        .current_dir(&dir));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("off-cpu needs kernel sampling"), "{stderr}");
    assert!(!dir.join("x.db").exists());
}
