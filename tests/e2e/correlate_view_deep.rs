//! Very deep trees: recursion and loop nests hundreds of thousands of levels deep must go
//! through `hpcprof-rs` and every view and output form of `hpcview-rs` on an ordinary 8 MB
//! main-thread stack, in time and space linear in the tree's size, and every output must still
//! hold the whole depth.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::correlate_view_support::folded_lines;
use crate::support::symbols::SymbolTable;
use crate::support::{compile, run_ok, scratch_dir, tool, tool_command};
use crate::synthetic_db::Builder;
use correlate::{Database, DbNodeId, NodeKind};
use profiler::builder::{code, ProfileBuilder};
use profiler::db::{AddrKind, EventDesc, Profile, Sampling};

/// Levels of recursion, and of loop nesting, in the synthetic inputs.
const DEPTH: u32 = 300_000;

/// Samples at the bottom of the recursion in the synthetic database.
const RECURSION_SAMPLES: u64 = 3;

/// Samples in the innermost loop of the synthetic database.
const NEST_SAMPLES: u64 = 2;

/// First line of the loop nest: loop `k` (from 0) begins at line `NEST_LINE + k`.
const NEST_LINE: u32 = 31;

/// `main` calls `down`, which recurses `DEPTH` times and then calls `bottom` (3 samples at its
/// line 21), and `nest`, whose body is `DEPTH` nested loops (2 samples in the innermost).
fn deep_database() -> Database {
    let mut b = Builder::for_source("/opt/deep/deep.c", 1);
    let main = b.add(DbNodeId::ROOT, NodeKind::Procedure, "main", 1);
    let mut down = b.call(main, 5, "down", 10);
    for _ in 1..DEPTH {
        down = b.call(down, 12, "down", 10);
    }
    let bottom = b.call(down, 13, "bottom", 20);
    let line = b.add(bottom, NodeKind::Statement, "", 21);
    b.sample(line, 0, RECURSION_SAMPLES);
    let mut scope = b.call(main, 6, "nest", 30);
    for k in 0..DEPTH {
        scope = b.add(scope, NodeKind::Loop, "", NEST_LINE + k);
    }
    let line = b.add(scope, NodeKind::Statement, "", NEST_LINE + DEPTH);
    b.sample(line, 0, NEST_SAMPLES);
    b.into_database()
}

/// The depth of the deepest node of `db` (the root is at depth 0).
fn max_depth(db: &Database) -> usize {
    let mut depth = vec![0usize; db.nodes.len()];
    for (i, n) in db.nodes.iter().enumerate().skip(1) {
        depth[i] = depth[n.parent.index()] + 1;
    }
    depth.into_iter().max().unwrap_or(0)
}

/// Nesting of JSON output, read by scanning: (node objects, depth of the deepest node with the
/// root at 0). Panics if brackets do not balance.
fn json_shape(json: &str) -> (usize, usize) {
    let (mut level, mut deepest, mut objects) = (0usize, 0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for b in json.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' => {
                level += 1;
                objects += 1;
                deepest = deepest.max(level);
            }
            b'}' => level = level.checked_sub(1).expect("balanced braces"),
            _ => {}
        }
    }
    assert_eq!(level, 0, "unbalanced JSON");
    let metrics = json.matches("\"unit\":").count();
    // The top-level object and the metric objects are not nodes; nodes nest two braces deep
    // below the top level (the root at brace level 2).
    (objects - 1 - metrics, deepest - 2)
}

/// A command running workspace tool `name` with the usual 8 MB main-thread stack limit.
fn with_8mb_stack(name: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "ulimit -s 8192 && exec \"$0\" \"$@\""])
        .arg(tool(name));
    cmd
}

/// Run `hpcview-rs DB args` with an 8 MB stack; it must succeed.
fn view(db: &Path, args: &[&str]) -> String {
    let out = with_8mb_stack("hpcview-rs")
        .arg(db)
        .args(args)
        .output()
        .expect("run hpcview-rs");
    assert!(
        out.status.success(),
        "hpcview-rs {args:?}: {} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The number of text rows below the heading.
fn text_rows(text: &str) -> usize {
    text.lines()
        .skip_while(|l| !l.ends_with("  scope"))
        .skip(1)
        .count()
}

fn write_deep_database(dir: &Path) -> (PathBuf, Database) {
    let db = deep_database();
    let path = dir.join("deep.hpcdb");
    db.write_new(&path).expect("write the database");
    (path, db)
}

#[test]
fn top_down_view_of_deep_recursion_and_loop_nests_in_every_form() {
    let dir = scratch_dir("view-deep-top-down");
    let (path, db) = write_deep_database(&dir);
    let deepest = max_depth(&db);
    assert_eq!(deepest as u32, 2 * DEPTH + 4);

    let folded = folded_lines(&view(&path, &["--folded"]));
    let shapes: Vec<(usize, u64)> = folded
        .iter()
        .map(|(p, n)| (p.split(';').count(), *n))
        .collect();
    let frames = DEPTH as usize + 2;
    assert_eq!(
        shapes,
        [(frames, RECURSION_SAMPLES), (frames, NEST_SAMPLES)]
    );
    let recursion: Vec<&str> = folded[0].0.split(';').collect();
    assert_eq!((recursion[0], recursion[frames - 1]), ("main", "bottom"));
    assert!(recursion[1..frames - 1].iter().all(|f| *f == "down"));
    let innermost = format!("loop at deep.c: {}", NEST_LINE + DEPTH - 1);
    assert_eq!(folded[1].0.rsplit(';').next(), Some(innermost.as_str()));

    let json = view(&path, &["--json"]);
    assert_eq!(json_shape(&json), (db.nodes.len(), deepest));

    let text = view(&path, &[]);
    assert_eq!(text_rows(&text), db.nodes.len(), "every scope holds >= 40%");
    assert!(text.contains(&format!("[{deepest}] deep.c: 21")));
    assert!(
        text.len() < 400 * db.nodes.len(),
        "indentation is capped: {} bytes for {} rows",
        text.len(),
        db.nodes.len()
    );
}

#[test]
fn callers_and_flat_views_of_deep_trees_in_every_form() {
    let dir = scratch_dir("view-deep-callers-flat");
    let (path, _) = write_deep_database(&dir);
    let depth = DEPTH as usize;

    // Callers: bottom, then the chain of its DEPTH callers `down`, then main.
    let (_, callers_depth) = json_shape(&view(&path, &["--callers", "--json"]));
    assert_eq!(callers_depth, depth + 2);
    let text = view(&path, &["--callers"]);
    assert!(
        text.contains(&format!("[{}] main", depth + 2)),
        "{}",
        &text[..2000]
    );

    // Flat: module > file > nest > DEPTH loops > the innermost line.
    let (_, flat_depth) = json_shape(&view(&path, &["--flat", "--json"]));
    assert_eq!(flat_depth, depth + 4);
    let text = view(&path, &["--flat"]);
    let innermost = NEST_LINE + DEPTH;
    assert!(text.contains(&format!("[{}] deep.c: {innermost}", depth + 4)));

    // Source: the recursive call's line counts the recursion once, not once per level.
    let source = view(&path, &["--source", "deep.c"]);
    let line = |n: u32| {
        source
            .lines()
            .find(|l| l.split_whitespace().last() == Some(&n.to_string()))
            .unwrap_or_else(|| panic!("line {n} in:\n{}", &source[..1000]))
            .to_string()
    };
    assert!(line(12).contains("60.0%"), "{}", line(12));
    assert!(line(innermost).contains("40.0%"), "{}", line(innermost));
}

/// A profile of `DEPTH` recursive calls of `down` in the compiled fixture `app`, from `main`,
/// with 5 samples in `bottom`.
fn deep_profile(app: &Path) -> Profile {
    let symbols = SymbolTable::read(app.to_str().unwrap());
    let at = |name: &str, kind| {
        let r = symbols
            .range(name)
            .unwrap_or_else(|| panic!("{name} in the fixture"));
        code(0, r.start + (r.end - r.start) / 2, kind)
    };
    let mut path = vec![at("main", AddrKind::Return)];
    path.extend((0..DEPTH).map(|_| at("down", AddrKind::Return)));
    path.push(at("bottom", AddrKind::Ip));
    let app = app.display().to_string();
    let event = EventDesc::new("cpu-clock", Sampling::Period(1_000_000), "ns");
    ProfileBuilder::new(&app, event)
        .module(&app)
        .thread(1, 1, "app")
        .path(&path, 5, 1_000_000)
        .build()
}

/// A structure file for the fixture `app`: `main` and `down` one statement each, and `bottom`
/// a nest of `DEPTH` loops (lines `NEST_LINE...`) around one statement covering all its code.
fn nest_structure(app: &Path) -> String {
    let symbols = SymbolTable::read(app.to_str().unwrap());
    let src = crate::support::fixture("run_recursion.c");
    let mut xml = format!(
        "<?xml version=\"1.0\"?>\n<HPCToolkitStructure i=\"0\" version=\"4.9\" n=\"\">\n\
         <LM i=\"1\" n=\"{}\" has-calls=\"0\">\n<F i=\"2\" n=\"{}\">\n",
        app.display(),
        src.display()
    );
    for (name, line) in [("main", 24), ("down", 19), ("bottom", 9)] {
        let r = symbols.range(name).expect("symbol");
        let entry = format!("{{[{:#x}-{:#x})}}", r.start, r.start + 1);
        let all = format!("{{[{:#x}-{:#x})}}", r.start, r.end);
        xml += &format!("<P n=\"{name}\" l=\"{line}\" v=\"{entry}\">\n");
        let loops = if name == "bottom" { DEPTH } else { 0 };
        for k in 0..loops {
            xml += &format!("<L l=\"{}\" v=\"{entry}\">\n", NEST_LINE + k);
        }
        xml += &format!("<S l=\"{line}\" v=\"{all}\"/>\n");
        xml += &"</L>\n".repeat(loops as usize);
        xml += "</P>\n";
    }
    xml + "</F>\n</LM>\n</HPCToolkitStructure>\n"
}

/// Run `hpcprof-rs` with an 8 MB stack on `inputs`, writing `db`; it must succeed.
fn hpcprof(dir: &Path, inputs: &[&Path], db: &Path) {
    run_ok(
        with_8mb_stack("hpcprof-rs")
            .args(inputs)
            .arg("-o")
            .arg(db)
            .env("XDG_CACHE_HOME", dir.join("cache")),
    );
}

#[test]
fn hpcprof_writes_and_hpcview_reads_a_deep_profile() {
    let dir = scratch_dir("view-deep-hpcprof");
    let app = compile("run_recursion.c", &dir, "app", &["-O2", "-g"]);
    let profile = dir.join("deep.db");
    deep_profile(&app)
        .write(&profile)
        .expect("write the profile");
    let structure = dir.join("app.hpcstruct");
    std::fs::write(&structure, nest_structure(&app)).expect("write the structure file");
    let db_path = dir.join("deep.hpcdb");
    hpcprof(&dir, &[&profile, &structure], &db_path);
    let db = Database::read(&db_path).expect("read the database");

    // main, DEPTH recursive calls of down, bottom, DEPTH loops.
    let folded = folded_lines(&view(&db_path, &["--folded"]));
    assert_eq!(folded.len(), 1, "one path");
    let frames: Vec<&str> = folded[0].0.split(';').collect();
    let depth = DEPTH as usize;
    assert_eq!(frames.len(), 2 * depth + 2);
    assert_eq!((frames[0], frames[depth + 1]), ("main", "bottom"));
    assert!(frames[1..=depth].iter().all(|f| *f == "down"));
    let innermost = format!("loop at run_recursion.c: {}", NEST_LINE + DEPTH - 1);
    assert_eq!(frames.last(), Some(&innermost.as_str()));
    assert_eq!(folded[0].1, 5);
    // Flat: module > file > bottom > DEPTH loops > line 9.
    let (_, flat_depth) = json_shape(&view(&db_path, &["--flat", "--json"]));
    assert_eq!(flat_depth, depth + 4);

    let (nodes, deepest) = json_shape(&view(&db_path, &["--json"]));
    assert_eq!((nodes, deepest), (db.nodes.len(), max_depth(&db)));
    let (_, callers) = json_shape(&view(&db_path, &["--callers", "--json"]));
    assert!(
        callers > DEPTH as usize,
        "callers of bottom: {callers} levels"
    );
    assert!(text_rows(&view(&db_path, &["--flat"])) > 3);
    assert_eq!(text_rows(&view(&db_path, &[])), db.nodes.len());
}

#[test]
fn a_measured_20000_level_recursion_goes_through_every_view() {
    let dir = scratch_dir("view-deep-measured");
    let app = compile("run_recursion.c", &dir, "app", &["-O2", "-g"]);
    let profile = dir.join("app.db");
    run_ok(
        tool_command("hpcrun-rs")
            .args(["-q", "-e", "cpu-clock@f1000", "-o"])
            .arg(&profile)
            .arg(&app)
            .arg("20000")
            .current_dir(&dir),
    );
    let db_path = dir.join("app.hpcdb");
    hpcprof(&dir, &[&profile], &db_path);
    let db = Database::read(&db_path).expect("read the database");

    // Every sample is on one folded line, and the deepest line is as deep as the deepest frame.
    let folded = folded_lines(&view(&db_path, &["--folded"]));
    let total: u64 = folded.iter().map(|(_, n)| n).sum();
    assert_eq!(total, db.metrics[0].total.samples);
    let (nodes, deepest) = json_shape(&view(&db_path, &["--json"]));
    assert_eq!((nodes, deepest), (db.nodes.len(), max_depth(&db)));
    assert!(text_rows(&view(&db_path, &["--threshold", "0"])) == db.nodes.len());
    for args in [
        &["--callers"][..],
        &["--callers", "--json"],
        &["--flat"],
        &["--flat", "--json"],
    ] {
        assert!(!view(&db_path, args).is_empty());
    }
    let source = view(&db_path, &["--source", "run_recursion.c"]);
    assert!(source.contains("down(depth - 1, n)"), "{source}");
}
