//! The terminal conveniences of `hpcview-rs` on a database with known costs (`main` 60 ms:
//! its own line 6, 20 ms, and `work`, 40 ms at its line 11): `--csv` for the tree views,
//! `--sort`, `--top`, `--focus`, `--hide`, `-o FILE`, and the pager on a terminal.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{run, scratch_dir, tool, tool_command};
use crate::synthetic_db::two_threads;

fn database(test: &str) -> (PathBuf, PathBuf) {
    let dir = scratch_dir(test);
    let db = dir.join("app.hpcdb");
    two_threads(&db);
    (dir, db)
}

/// Run hpcview-rs on `db` with `args`: (exit code, stdout, stderr).
fn view(db: &Path, args: &[&str]) -> (i32, String, String) {
    let o = run(tool_command("hpcview-rs").arg(db).args(args));
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The CSV records of `args --csv` without the file column (a path in the scratch directory).
fn csv(db: &Path, args: &[&str]) -> Vec<String> {
    let mut all = args.to_vec();
    all.push("--csv");
    let (code, out, err) = view(db, &all);
    assert_eq!(code, 0, "{err}");
    out.lines()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            [&f[..4], &f[5..]].concat().join(",")
        })
        .collect()
}

#[test]
fn csv_lists_every_scope_with_its_costs() {
    let (_dir, db) = database("view_shape_csv");
    assert_eq!(
        csv(&db, &[]),
        [
            "depth,kind,scope,call_site,line,cpu-clock (I),cpu-clock (E)",
            "0,root,<program root>,,,60000000,0",
            "1,procedure,main,,1,60000000,20000000",
            "2,procedure,work,,10,40000000,40000000",
            "3,statement,app.c: 11,,11,40000000,40000000",
            "2,statement,app.c: 6,,6,20000000,20000000",
        ]
    );
}

/// Names holding the CSV's own separators (commas, quotes, a line break) come back whole when
/// another program reads the file: Python's `csv` module, as a spreadsheet script would.
#[test]
fn csv_fields_with_separators_read_back_by_python() {
    let dir = scratch_dir("view_shape_csv_python");
    let db = dir.join("odd.hpcdb");
    let odd = "operator, \"quoted\"\nnext line";
    let mut b = crate::synthetic_db::Builder::new(1);
    let main = b.add(
        correlate::DbNodeId::ROOT,
        correlate::NodeKind::Procedure,
        odd,
        1,
    );
    let line = b.add(main, correlate::NodeKind::Statement, "", 2);
    b.sample(line, 0, 7);
    b.finish(&db);
    let csv_file = dir.join("odd.csv");
    let (code, _, err) = view(&db, &["--csv", "-o", csv_file.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let script = "import csv, json, sys\n\
                  print(json.dumps(list(csv.reader(open(sys.argv[1], newline='')))))";
    let o = run(Command::new("python3").args(["-c", script]).arg(&csv_file));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: Vec<Vec<String>> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rows.len(), 4, "{rows:?}");
    assert_eq!(rows[2][..3], ["1", "procedure", odd], "{rows:?}");
    assert_eq!(rows[2][6..], ["7000000", "7000000"], "{rows:?}");
    assert!(rows.iter().all(|r| r.len() == 8), "{rows:?}");
}

#[test]
fn sort_top_focus_and_hide_shape_the_view() {
    let (_dir, db) = database("view_shape_flags");
    let scopes = |args: &[&str]| -> Vec<String> {
        csv(&db, args)[1..]
            .iter()
            .map(|r| {
                let f: Vec<&str> = r.split(',').collect();
                format!("{} {}", f[2], f[5])
            })
            .collect()
    };
    assert_eq!(
        scopes(&["--sort", "name"]),
        [
            "<program root> 60000000",
            "main 60000000",
            "app.c: 6 20000000",
            "work 40000000",
            "app.c: 11 40000000"
        ]
    );
    assert_eq!(
        scopes(&["--top", "1"]),
        [
            "<program root> 60000000",
            "main 60000000",
            "work 40000000",
            "app.c: 11 40000000"
        ]
    );
    // Only what passes through work: 40 ms, main left with nothing of its own.
    assert_eq!(
        scopes(&["--focus", "^wor"]),
        [
            "<program root> 40000000",
            "main 40000000",
            "work 40000000",
            "app.c: 11 40000000"
        ]
    );
    assert_eq!(
        csv(&db, &["--focus", "^work$"])[2],
        "1,procedure,main,,1,40000000,0"
    );
    assert_eq!(
        scopes(&["--hide", "^work$"]),
        [
            "<program root> 20000000",
            "main 20000000",
            "app.c: 6 20000000"
        ]
    );
    // The text view prints the shaped tree, percentages of the whole program.
    let (_, text, _) = view(&db, &["--focus", "work", "--threshold", "0"]);
    assert!(
        text.contains(" 66.7%") && !text.contains("app.c: 6"),
        "{text}"
    );

    for (args, message) in [
        (&["--sort", "bogus"][..], "--sort bogus: no such column"),
        (
            &["--focus", "nothing-here"],
            "--focus nothing-here: no scope matches",
        ),
        (&["--hide", "("], "--hide (: not a regular expression"),
    ] {
        let (code, out, err) = view(&db, args);
        assert_eq!((code, out.as_str()), (2, ""), "{args:?}");
        assert!(
            err.starts_with(&format!("hpcview-rs: error: {message}")),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn output_file_is_written_whole_and_not_through_a_symlink() {
    let (dir, db) = database("view_shape_output");
    let (_, stdout_json, _) = view(&db, &["--json"]);
    let file = dir.join("view.json");
    let (code, out, err) = view(&db, &["--json", "-o", file.to_str().unwrap()]);
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), stdout_json);
    // A symlink planted at the name is replaced, its target left alone.
    let target = dir.join("victim");
    std::fs::write(&target, "keep").unwrap();
    let link = dir.join("link.csv");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let (code, _, err) = view(&db, &["--csv", "--output", link.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    assert!(!link.is_symlink());
    assert!(std::fs::read_to_string(&link)
        .unwrap()
        .starts_with("depth,kind,scope"));
}

#[test]
fn a_terminal_gets_the_pager() {
    let (_dir, db) = database("view_shape_pager");
    // `script` gives hpcview-rs a terminal; the pager marks each line it passes on.
    let on_terminal = |extra: &str| {
        let line = format!(
            "{} {} --color never {extra}",
            tool("hpcview-rs").display(),
            db.display()
        );
        let o = run(Command::new("script")
            .args(["-qec", &line, "/dev/null"])
            .env("PAGER", "sed s/^/PAGED:/"));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).replace('\r', "")
    };
    let paged = on_terminal("");
    let rows: Vec<&str> = paged.lines().filter(|l| l.contains('%')).collect();
    assert!(
        rows.len() >= 4 && rows.iter().all(|l| l.starts_with("PAGED:")),
        "{paged}"
    );
    let direct = on_terminal("--no-pager");
    assert!(
        direct.contains("100.0%") && !direct.contains("PAGED:"),
        "{direct}"
    );
    // Not a terminal: no pager.
    let (_, piped, _) = view(&db, &[]);
    assert!(piped.contains("100.0%") && !piped.contains("PAGED:"));
}
