//! Loop recovery on fixture C programs compiled with gcc at -O0, -O2 and -O3.
//!
//! Fixture lines holding a loop carry a `LOOP <depth>` marker comment. Each test reads one
//! function's bytes from the ELF symbol table, builds its CFG and loop forest, asks
//! `LoopForest::begin_line` for every loop with a line table taken from binutils' `addr2line`
//! (an independent reader of the DWARF line program) and compares with the markers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use structure::cfg::{CallKind, Cfg, CfgEnv, CodeRange, Terminator};
use structure::loops::{LoopForest, LoopId, LOOP_BEGIN_TOLERANCE};

/// How far a recovered begin line may be from the marked source line.
const LINE_SLACK: u32 = 2;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

/// Compile fixture `source` with gcc `-g` and `flags`; the output name encodes the flags.
/// Each output is built once per test process, under a lock: tests running at once ask for
/// the same builds, and gcc writing a binary that another test reads gave that test a
/// truncated file (a fresh run's "loop has a line").
fn compile(source: &str, flags: &[&str]) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("loops");
    std::fs::create_dir_all(&dir).unwrap();
    let tag: String = flags.concat().replace(['-', '='], "");
    let out = dir.join(format!("{}{tag}", source.trim_end_matches(".c")));
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if built.contains(&out) {
        return out;
    }
    let result = Command::new("gcc")
        .arg("-g")
        .args(flags)
        .arg(fixtures_dir().join(source))
        .arg("-o")
        .arg(&out)
        .output()
        .expect("run gcc");
    assert!(
        result.status.success(),
        "gcc {flags:?} {source}: {}",
        String::from_utf8_lossy(&result.stderr)
    );
    built.push(out.clone());
    out
}

/// A loop marker in a fixture: source line and nesting depth.
#[derive(Clone, Copy, Debug)]
struct Marker {
    line: u32,
    depth: u32,
}

/// Markers of function `func` in fixture `source`: the `LOOP <d>` comments between the line
/// that defines `func` and the next line that is a lone `}`.
fn markers(source: &str, func: &str) -> Vec<Marker> {
    let text = std::fs::read_to_string(fixtures_dir().join(source)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.contains(&format!(" {func}(")) && !l.trim_end().ends_with(';'))
        .unwrap_or_else(|| panic!("{func} not defined in {source}"));
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate().skip(start) {
        if *l == "}" {
            break;
        }
        if let Some(rest) = l.split("LOOP ").nth(1) {
            let depth = rest.split_whitespace().next().unwrap().parse().unwrap();
            out.push(Marker {
                line: i as u32 + 1,
                depth,
            });
        }
    }
    out
}

/// One analysed function: its CFG, loop forest and the begin line of each loop.
struct Analysis {
    entry: u64,
    cfg: Cfg,
    forest: LoopForest,
    begin: Vec<u32>,
}

impl Analysis {
    fn max_depth(&self) -> u32 {
        self.forest.loops.iter().map(|l| l.depth).max().unwrap_or(0)
    }

    /// The marker nearest to loop `i`'s begin line, if within the slack.
    fn marker_of(&self, i: usize, marks: &[Marker]) -> Option<Marker> {
        let m = *marks
            .iter()
            .min_by_key(|m| m.line.abs_diff(self.begin[i]))?;
        (m.line.abs_diff(self.begin[i]) <= LINE_SLACK).then_some(m)
    }

    /// Loops whose nearest marker (within the slack) is the one at `line`.
    fn loops_at<'a>(&'a self, line: u32, marks: &'a [Marker]) -> impl Iterator<Item = LoopId> + 'a {
        (0..self.forest.len())
            .filter(move |&i| self.marker_of(i, marks).is_some_and(|m| m.line == line))
            .map(|i| LoopId(i as u32))
    }
}

/// Read `func` from `bin`, build its CFG and loops, and find each loop's begin line.
fn analyse(bin: &Path, func: &str) -> Analysis {
    let data = std::fs::read(bin).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let sym = file
        .symbols()
        .find(|s| s.kind() == SymbolKind::Text && s.name() == Ok(func))
        .unwrap_or_else(|| panic!("no symbol {func} in {}", bin.display()));
    let sections: Vec<(u64, &[u8])> = file
        .sections()
        .filter_map(|s| Some((s.address(), s.data().ok()?)))
        .collect();
    let read = |addr: u64, len: usize| -> Option<&[u8]> {
        let (start, bytes) = sections
            .iter()
            .find(|(s, d)| *s <= addr && addr - s < d.len() as u64)?;
        let off = (addr - start) as usize;
        bytes.get(off..off + len)
    };
    let bytes = read(sym.address(), sym.size() as usize).unwrap();
    let env = CfgEnv {
        is_noreturn: &|_| false,
        read_data: &read,
        landing_pads: &[],
    };
    let cfg = Cfg::build(
        &[CodeRange {
            start: sym.address(),
            bytes,
        }],
        &env,
    );
    let forest = LoopForest::build(&cfg);
    let lines = addr2line(bin, &cfg.insn_addrs);
    let line_of = |a: u64| lines.get(&a).copied();
    let begin = (0..forest.len())
        .map(|i| {
            forest
                .begin_line(&cfg, LoopId(i as u32), &line_of, LOOP_BEGIN_TOLERANCE)
                .expect("loop has a line")
                .line
        })
        .collect();
    Analysis {
        entry: sym.address(),
        cfg,
        forest,
        begin,
    }
}

/// Lines of `addrs` according to binutils `addr2line` (files interned to ids).
fn addr2line(bin: &Path, addrs: &[u64]) -> HashMap<u64, (u32, u32)> {
    let out = Command::new("addr2line")
        .arg("-e")
        .arg(bin)
        .args(addrs.iter().map(|a| format!("{a:#x}")))
        .output()
        .expect("run addr2line");
    let text = String::from_utf8(out.stdout).unwrap();
    let mut files: HashMap<String, u32> = HashMap::new();
    let mut map = HashMap::new();
    for (&addr, row) in addrs.iter().zip(text.lines()) {
        let row = row.split(" (").next().unwrap();
        let Some((file, line)) = row.rsplit_once(':') else {
            continue;
        };
        let Ok(line) = line.parse::<u32>() else {
            continue;
        };
        let next = files.len() as u32;
        let id = *files.entry(file.to_string()).or_insert(next);
        map.insert(addr, (id, line));
    }
    map
}

const SHAPES: &str = "loops_shapes.c";
const SHAPE_FUNCS: &[&str] = &[
    "single_loop",
    "double_loop",
    "triple_loop",
    "break_continue",
    "do_while",
    "switch_loop",
    "main",
];

#[test]
fn o0_loops_match_source_one_to_one() {
    let bin = compile(SHAPES, &["-O0"]);
    for func in SHAPE_FUNCS {
        let marks = markers(SHAPES, func);
        let a = analyse(&bin, func);
        assert_eq!(a.forest.len(), marks.len(), "{func}: loop count");
        for m in &marks {
            let found: Vec<LoopId> = a.loops_at(m.line, &marks).collect();
            assert_eq!(found.len(), 1, "{func}: one loop at line {}", m.line);
            let lp = a.forest.get(found[0]);
            assert_eq!(lp.depth, m.depth, "{func}: depth of loop at {}", m.line);
            assert!(!lp.irreducible, "{func}: loop at {} is reducible", m.line);
            assert_eq!(lp.entries, vec![lp.header]);
        }
    }
}

#[test]
fn optimized_loops_keep_source_lines_and_nesting() {
    for opt in ["-O2", "-O3"] {
        let bin = compile(SHAPES, &[opt]);
        for func in SHAPE_FUNCS {
            let marks = markers(SHAPES, func);
            let a = analyse(&bin, func);
            let max_mark = marks.iter().map(|m| m.depth).max().unwrap_or(0);
            // gcc may fully unroll main's small constant loop; other loops must survive.
            if *func != "main" {
                assert!(a.max_depth() >= max_mark, "{func} {opt}: nesting depth");
                for m in &marks {
                    assert!(
                        a.loops_at(m.line, &marks).next().is_some(),
                        "{func} {opt}: no loop at line {} (begin lines {:?})",
                        m.line,
                        a.begin
                    );
                }
            }
            // Every recovered loop is at a marked line, and a loop at an inner marker sits
            // inside a loop at an enclosing marker (not necessarily the next one out: at -O3
            // gcc peels the last `j` iteration of triple_loop, leaving a `k` loop directly in
            // the `i` loop).
            for (i, lp) in a.forest.loops.iter().enumerate() {
                let mark = a
                    .marker_of(i, &marks)
                    .unwrap_or_else(|| panic!("{func} {opt}: loop at {} unmarked", a.begin[i]));
                if mark.depth > 1 {
                    let mut up = lp.parent;
                    let ok = std::iter::from_fn(|| {
                        let p = up?;
                        up = a.forest.get(p).parent;
                        Some(p)
                    })
                    .any(|p| {
                        a.marker_of(p.index(), &marks)
                            .is_some_and(|o| o.depth < mark.depth)
                    });
                    assert!(
                        ok,
                        "{func} {opt}: loop at {} not in an outer loop",
                        mark.line
                    );
                }
            }
        }
    }
}

#[test]
fn switch_in_loop_resolves_jump_table_at_all_levels() {
    let builds = [
        compile(SHAPES, &["-O0"]),
        compile(SHAPES, &["-O2"]),
        compile(SHAPES, &["-O3"]),
        compile(SHAPES, &["-O2", "-fno-pie", "-no-pie"]),
    ];
    for bin in &builds {
        let a = analyse(bin, "switch_loop");
        let tables: Vec<_> = a
            .cfg
            .blocks
            .iter()
            .filter(|b| matches!(b.terminator, Terminator::JumpTable { .. }))
            .collect();
        assert_eq!(tables.len(), 1, "{}: one jump table", bin.display());
        // Nine cases: 0..=8 (the default may share a target with none of them).
        assert!(
            tables[0].succs.len() >= 9,
            "{}: table targets",
            bin.display()
        );
        assert_eq!(a.forest.len(), 1, "{}: loops", bin.display());
        let lp = &a.forest.loops[0];
        for e in &tables[0].succs {
            assert!(
                a.forest.contains(LoopId(0), e.to),
                "case block outside the loop"
            );
        }
        assert!(!lp.irreducible);
        let indirect = a
            .cfg
            .blocks
            .iter()
            .filter(|b| b.terminator == Terminator::IndirectJump)
            .count();
        assert_eq!(indirect, 0, "{}: unresolved indirect jumps", bin.display());
    }
}

#[test]
fn recursion_has_calls_but_no_loop() {
    for opt in ["-O0", "-O2", "-O3"] {
        let bin = compile(SHAPES, &[opt]);
        let a = analyse(&bin, "recurse");
        assert!(a.forest.is_empty(), "recurse {opt}: loops found");
        let self_calls = a
            .cfg
            .calls
            .iter()
            .filter(|c| c.kind == CallKind::Call && c.target == Some(a.entry))
            .count();
        assert!(self_calls >= 1, "recurse {opt}: no call to itself");
        if opt == "-O0" {
            assert_eq!(self_calls, 2);
        }
    }
}

#[test]
fn goto_into_loop_body_is_irreducible_at_o0() {
    let src = "loops_irreducible.c";
    let mark = markers(src, "irreducible")[0];
    let a = analyse(&compile(src, &["-O0"]), "irreducible");
    assert_eq!(a.forest.len(), 1);
    let lp = &a.forest.loops[0];
    assert!(lp.irreducible);
    assert_eq!(lp.entries.len(), 2);
    assert_eq!(lp.entries[0], lp.header);
    assert!(lp.blocks.contains(&lp.entries[1]));
    assert!(a.begin[0].abs_diff(mark.line) <= LINE_SLACK);
    for opt in ["-O2", "-O3"] {
        let a = analyse(&compile(src, &[opt]), "irreducible");
        assert!(!a.forest.is_empty(), "{opt}: the loop is kept");
        for (i, lp) in a.forest.loops.iter().enumerate() {
            assert!(
                a.begin[i].abs_diff(mark.line) <= LINE_SLACK,
                "{opt}: begin line"
            );
            assert_eq!(lp.irreducible, lp.entries.len() > 1);
        }
    }
}
