"""What the benchmark scripts share: timing a command with its CPU time, and rounds of
alternating runs summarised as medians with their spread (this 2-core VM is noisy), and the
application's own time inside a profiler's command line (`app_timer`)."""
import os
import random
import statistics
import subprocess
import sys
import time

PARANOID = "/proc/sys/kernel/perf_event_paranoid"


def paranoid(level=None):
    """Read, or (as root) set, kernel.perf_event_paranoid."""
    if level is not None:
        with open(PARANOID, "w") as f:
            f.write(str(level))
    with open(PARANOID) as f:
        return int(f.read())


def timed(cmd, cwd, env=None):
    """Run cmd; return (wall seconds, user+sys CPU seconds of it and its descendants, stderr).

    samply refuses to run at perf_event_paranoid > 1 even as root; as root, the level is lowered
    to 1 for samply's runs only and restored at once."""
    saved = None
    if "samply" in os.path.basename(cmd[0]) and paranoid() > 1 and os.geteuid() == 0:
        saved = paranoid()
        paranoid(1)
    try:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        stderr = proc.stderr.read().decode(errors="replace")
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"failed: {' '.join(cmd)}\n{stderr}")
        return wall, usage.ru_utime + usage.ru_stime, stderr
    finally:
        if saved is not None:
            paranoid(saved)


def rounds(tools, cwd, runs, after=None, app_report=None):
    """Run every command of `tools` (name -> argv) once per round, in a new random order each
    round; returns name -> list of (wall, cpu). `after(name, stderr)` sees each run's stderr.
    With `app_report`, the file every command's `app_timer` writes to, each run's tuple is
    (wall, cpu, app wall, app cpu, app preemptions); a run whose `after` returns such an
    (app wall, app cpu, app preemptions) itself (one that cannot be run under `app_timer`)
    takes that instead."""
    results = {name: [] for name in tools}
    for _ in range(runs):
        order = list(tools)
        random.shuffle(order)
        for name in order:
            if app_report and os.path.exists(app_report):
                os.remove(app_report)
            wall, cpu, stderr = timed(tools[name], cwd)
            own = after(name, stderr) if after else None
            app = own or (read_app_time(app_report) if app_report else ())
            results[name].append((wall, cpu) + app)
    return results


def spread(values):
    """`median [min-max]` of values."""
    return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"


def table(title, results, columns=("wall s", "cpu s"), notes=None):
    """Print, for every run of `results` (name -> list of tuples as `rounds` returns them), the
    median [min-max] of each of `columns` (the tuples' first fields) and its ratio to the
    median of the `bare` row, then its note from `notes` (name -> text)."""
    def median(runs, i):
        return statistics.median(r[i] for r in runs)
    print(f"\n{title}")
    print(f"{'run':<40}" + "".join(f"{c + ' [min-max]':>24}{'ratio':>8}" for c in columns) + "  notes")
    for name, runs in results.items():
        cells = "".join(f"{spread([r[i] for r in runs]):>24}{median(runs, i) / median(results['bare'], i):>7.3f}x"
                        for i in range(len(columns)))
        print(f"{name:<40}{cells}  {(notes or {}).get(name, '')}")


def app_timer(report, work):
    """The argv prefix that runs a command and writes its own wall and CPU seconds, and its
    involuntary context switches, to `report`
    (scripts/apptime.c, compiled into `work`): inside a profiler's command line, it times the
    application alone, neither the profiler's start-up nor its own work."""
    exe = os.path.join(work, "apptime")
    if not os.path.exists(exe):
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "apptime.c")
        subprocess.run(["cc", "-O2", src, "-o", exe], check=True)
    return [exe, report]


def quartiles(values):
    """`median [first quartile-third quartile]` of values."""
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return f"{q2:.3f} [{q1:.3f}-{q3:.3f}]"


def paired(title, results, column, floor):
    """Print, for every run of `results`, ratios taken within each round, where the machine's
    state is shared (this VM's bare runs drift by 15% over minutes): the run's `column` over
    the bare run's, and its excess over the `floor` row in points (100 x (run - floor) / bare);
    medians [quartiles] over the rounds."""
    bare = [r[column] for r in results["bare"]]
    base = [r[column] for r in results[floor]]
    print(f"\n{title}")
    print(f"{'run':<40}{'ratio to bare [quartiles]':>28}{'points above floor [quartiles]':>34}")
    for name, runs in results.items():
        mine = [r[column] for r in runs]
        ratio = [m / b for m, b in zip(mine, bare)]
        above = [100 * (m - f) / b for m, f, b in zip(mine, base, bare)]
        print(f"{name:<40}{quartiles(ratio):>28}{quartiles(above):>34}")


def read_app_time(report):
    """(wall s, cpu s, involuntary context switches) as `app_timer` wrote them to `report`."""
    with open(report) as f:
        wall, cpu, preempted = f.read().split()
    return float(wall), float(cpu), int(preempted)
