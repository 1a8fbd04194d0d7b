"""What the benchmark scripts share: timing a command with its CPU time, and rounds of
alternating runs summarised as medians with their spread (this 2-core VM is noisy)."""
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


def rounds(tools, cwd, runs, after=None):
    """Run every command of `tools` (name -> argv) once per round, in a new random order each
    round; returns name -> list of (wall, cpu). `after(name, stderr)` sees each run's stderr."""
    results = {name: [] for name in tools}
    for _ in range(runs):
        order = list(tools)
        random.shuffle(order)
        for name in order:
            wall, cpu, stderr = timed(tools[name], cwd)
            results[name].append((wall, cpu))
            if after:
                after(name, stderr)
    return results


def spread(values):
    """`median [min-max]` of values."""
    return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"
