#!/usr/bin/env python3
"""Loop recovery on real binaries, against an independent oracle, and its speed.

Run by `scripts/bench-structure --loops [ROUNDS]` (which builds hpcstruct-rs first). Per binary:
loops, irreducible loops and unresolved indirect jumps as hpcstruct-rs reports them, wall time
and peak memory of hpcstruct-rs and of BASELINE (an older hpcstruct-rs, if given: its counts
and agreement too, on a row of their own; medians of ROUNDS alternating rounds, with min-max)
and of one `objdump -d -l` (left out with OBJDUMP=0: minutes on node), and, for programs built
here by clang, agreement with LLVM's own loop analysis. `dup.`: loops entered at several blocks
from copies of one duplicated test, and `split`: loops entered also at a short block that leads
straight to another entry (natural once it is split), both of which hpcstruct-rs counts apart
from the irreducible ones.

The oracle: each clang-built program is compiled to optimized LLVM IR (`clang -O2 -g -S
-emit-llvm`), LLVM prints the loops of every function of that IR (`opt -passes='print<loops>'`),
and the very same IR is turned into machine code by `llc`, so the binary and the loops LLVM
names come from one compilation. A function agrees when its loops have the same depths
(code generation after the IR keeps loops: rotation is done in the IR; block placement moves
blocks but keeps cycles). Vectorisation and unrolling are switched off for these builds: they
copy loops, which the structure file fuses back into the source's loop and LLVM counts each.

Corpus: libpython (largest with DWARF), ripgrep (built by bench-structure), node (if installed),
SQLite's amalgamation (from the libsqlite3-sys crate on crates.io) and the loop and C++ fixtures,
built by clang.
"""

import collections
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import urllib.request
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "target", "corpus")
SQLITE_CRATE = "https://static.crates.io/crates/libsqlite3-sys/libsqlite3-sys-0.30.1.crate"
# The vectorizer and the unroller copy loops (vector body, scalar remainder); the structure
# file fuses such copies back into the source's loop (thesis section 3.6), LLVM counts each.
NO_COPIES = ["-fno-vectorize", "-fno-slp-vectorize", "-fno-unroll-loops"]
SUMMARY = re.compile(
    r"(\d+) loops(?: \((?:(\d+) irreducible)?(?:, )?"
    r"(?:(\d+) entered through a duplicated test)?(?:, )?"
    r"(?:(\d+) entered through a short block)?\))?(?:, (\d+) indirect jumps unresolved)?"
)


def timed(cmd, out_path):
    """Wall seconds and peak KiB of one run of `cmd` (stdout to out_path)."""
    with tempfile.NamedTemporaryFile(mode="r") as t, open(out_path, "wb") as out:
        subprocess.run(
            ["/usr/bin/time", "-f", "%e %M", "-o", t.name] + cmd,
            stdout=out,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        secs, kib = t.read().split()[-2:]
        return float(secs), int(kib)


def llvm_loops(ll_path):
    """Function name -> sorted loop depths, from LLVM's loop analysis of the IR (the legacy
    pass manager's printer names each function; LLVM 15 and later name them in `print<loops>`)."""
    run = subprocess.run(
        ["opt", "-enable-new-pm=0", "-analyze", "-loops", ll_path],
        capture_output=True,
        text=True,
    )
    if run.returncode != 0:
        run = subprocess.run(
            ["opt", "-passes=print<loops>", "-disable-output", ll_path],
            capture_output=True,
            text=True,
            check=True,
        )
    loops = collections.defaultdict(list)
    function = None
    for line in (run.stdout + run.stderr).splitlines():
        m = re.search(r"for function '(.+)':$", line)
        if m:
            function = m.group(1)
            loops[function]
            continue
        m = re.search(r"Loop at depth (\d+) containing", line)  # also "Parallel Loop"
        if m and function is not None:
            loops[function].append(int(m.group(1)))
    return {f: sorted(d) for f, d in loops.items()}


def our_loops(structure_file):
    """Procedure link name -> sorted loop depths, from a structure file."""
    loops = {}
    stack = []
    for event, el in ET.iterparse(structure_file, events=("start", "end")):
        if event == "start":
            if el.tag == "P":
                name = el.get("ln") or el.get("n")
                loops.setdefault(name, [])
                stack = [name, 0]
            elif el.tag == "L" and stack:
                stack[1] += 1
                loops[stack[0]].append(stack[1])
        else:
            if el.tag == "L" and stack:
                stack[1] -= 1
            elif el.tag == "P":
                stack = []
            el.clear()
    return {f: sorted(d) for f, d in loops.items()}


def clang_build(name, sources, cxx, shared, work):
    """Compile `sources` to IR with clang -O2 -g, then to a binary with llc and clang (linking
    only). Returns (binary, [IR files])."""
    lls, objs = [], []
    for src in sources:
        base = os.path.join(work, f"{name}-{os.path.basename(src)}")
        ll, obj = base + ".ll", base + ".o"
        compiler = "clang++" if cxx else "clang"
        flags = ["-std=c++17"] if cxx else []
        subprocess.run(
            [compiler, "-O2", *NO_COPIES, "-g", "-S", "-emit-llvm", "-fPIC", *flags, src,
             "-o", ll],
            check=True,
            stderr=subprocess.DEVNULL,
        )
        subprocess.run(
            ["llc", "-O2", "-relocation-model=pic", "-filetype=obj", ll, "-o", obj],
            check=True,
        )
        lls.append(ll)
        objs.append(obj)
    out = os.path.join(work, name + (".so" if shared else ""))
    link = ["clang++" if cxx else "clang", *(["-shared"] if shared else []), *objs, "-o", out]
    subprocess.run(link + ["-lm", "-lpthread", "-ldl"], check=True)
    return out, lls


def sqlite_source():
    """SQLite's amalgamation, downloaded once into the corpus; None if unreachable."""
    src = os.path.join(CORPUS, "sqlite3", "sqlite3.c")
    if os.path.exists(src):
        return src
    os.makedirs(os.path.dirname(src), exist_ok=True)
    crate = os.path.join(CORPUS, "libsqlite3-sys.crate")
    try:
        urllib.request.urlretrieve(SQLITE_CRATE, crate)
    except OSError as e:
        print(f"bench-loops: cannot download SQLite ({e}); its row is skipped")
        return None
    subprocess.run(
        ["tar", "xzf", crate, "-C", os.path.dirname(src), "--strip-components=2",
         "libsqlite3-sys-0.30.1/sqlite3/sqlite3.c"],
        check=True,
    )
    return src


def compare(oracle, ours):
    """(functions compared, agreeing, LLVM loops, our loops, first disagreements)."""
    both = sorted(f for f in oracle if f in ours)
    agree = [f for f in both if oracle[f] == ours[f]]
    differ = [(f, oracle[f], ours[f]) for f in both if oracle[f] != ours[f]]
    return (
        len(both),
        len(agree),
        sum(len(oracle[f]) for f in both),
        sum(len(ours[f]) for f in both),
        differ,
    )


def spread(xs):
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def count_loops(label, binary, path, lls, work):
    """One row: what `binary` finds in `path`, and for clang builds (`lls`) LLVM's agreement."""
    out = os.path.join(work, "x.hpcstruct")
    r = subprocess.run([binary, path, "-o", out], capture_output=True, text=True)
    m = SUMMARY.search(r.stderr)
    loops, irr, dup, split, unres = (int(g or 0) for g in m.groups()) if m else (0,) * 5
    oracle_cols = ""
    differ = []
    if lls:
        oracle = {}
        for ll in lls:
            oracle.update(llvm_loops(ll))
        n, agree, lo, lu, differ = compare(oracle, our_loops(out))
        oracle_cols = f"{n:>15}{100 * agree / max(n, 1):>6.1f}%{lo:>9}/{lu:<7}"
    size = os.path.getsize(path) / 1e6
    pct = 100 * irr / max(loops, 1)
    print(f"{label:<26}{size:>6.1f}{loops:>8}{irr:>8}{pct:>6.1f}{dup:>7}{split:>7}{unres:>8}"
          f"{oracle_cols}")
    for f, want, got in differ[:5]:
        print(f"    {f[:70]}: llvm depths {want}, ours {got}")
    if len(differ) > 5:
        print(f"    ... and {len(differ) - 5} more functions differ")


def main():
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    ours_bin = sys.argv[1]
    baseline = os.environ.get("BASELINE")
    work = tempfile.mkdtemp(prefix="bench-loops.")
    try:
        corpus = []  # (name, path, [IR files] or None)
        python = subprocess.run(
            "find / -xdev -name 'libpython3*.so*' -type f -size +5M 2>/dev/null | "
            "while read f; do readelf -S -W \"$f\" | grep -q debug_info && "
            "echo \"$(stat -c %s \"$f\") $f\"; done | sort -rn | head -1 | cut -d' ' -f2-",
            shell=True, capture_output=True, text=True,
        ).stdout.strip()
        if python:
            corpus.append(("libpython", python, None))
        rg = os.path.join(CORPUS, "rg", "bin", "rg")
        if os.path.exists(rg):
            corpus.append(("ripgrep", rg, None))
        node = shutil.which("node")
        if node:
            corpus.append(("node", os.path.realpath(node), None))
        fixtures = os.path.join(ROOT, "tests", "fixtures")
        sqlite = sqlite_source()
        if sqlite:
            corpus.append(("sqlite (clang)", *clang_build("sqlite", [sqlite], False, True, work)))
        corpus.append((
            "loops_control.c (clang)",
            *clang_build("control", [os.path.join(fixtures, "loops_control.c")], False, False, work),
        ))
        corpus.append((
            "c++ fixtures (clang)",
            *clang_build(
                "cxx",
                [os.path.join(fixtures, f) for f in
                 ["bench_templates.cc", "inline_names_method.cc"]],
                True, False, work,
            ),
        ))

        print(f"{'binary':<26}{'MB':>6}{'loops':>8}{'irred.':>8}{'%':>6}{'dup.':>7}{'split':>7}"
              f"{'unres.':>8}"
              f"{'oracle: funcs':>15}{'agree':>7}{'loops llvm/ours':>17}")
        timing_rows = []
        builds = [("", ours_bin)] + ([("  baseline", baseline)] if baseline else [])
        for name, path, lls in corpus:
            for label, binary in builds:
                count_loops(label or name, binary, path, lls, work)
            timing_rows.append((name, path))

        print(f"\ntime (s) and peak memory (MiB), median (min-max) of {rounds} alternating rounds"
              " (objdump: one run)")
        tools = [("hpcstruct-rs", lambda p, o: [ours_bin, "-j", "2", p, "-o", o])]
        if baseline:
            tools.append(("baseline", lambda p, o: [baseline, "-j", "2", p, "-o", o]))
        if os.environ.get("OBJDUMP", "1") != "0":
            tools.append(("objdump -d -l", lambda p, o: ["objdump", "-d", "-l", p]))
        for name, path in timing_rows:
            samples = {t: ([], []) for t, _ in tools}
            for r in range(rounds):
                for t, cmd in tools:
                    if t == "objdump -d -l" and r > 0:
                        continue  # the reference for scale: minutes on node, once is enough
                    out = os.path.join(work, "t.out")
                    secs, kib = timed(cmd(path, out), out)
                    samples[t][0].append(secs)
                    samples[t][1].append(kib / 1024)
            cells = "  ".join(
                f"{t}: {spread(s)} s, {statistics.median(m):.0f} MiB"
                for t, (s, m) in samples.items()
            )
            print(f"{name:<26}{cells}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
