//! `hpcview-rs --html` on databases built through the library with known costs: per-thread
//! costs (the thread selector and the per-thread chart) and the threshold slider, checked in
//! headless Chromium; and the 100,000-scope benchmark that `scripts/bench-html` runs (ignored
//! by default: it measures, it asserts nothing about time).

use std::path::Path;
use std::time::Instant;

use crate::browser::{chromium, Browser};
use crate::correlate_view_support::run_view;
use crate::support::{run, scratch_dir, tool, tool_command};
use crate::synthetic_db::{two_threads, Builder};
use correlate::{Database, DbNodeId, NodeKind};

fn report(db: &Path, html: &Path) {
    let made = run_view(&tool("hpcview-rs"), db, &["--html", html.to_str().unwrap()]);
    assert!(made.stderr.contains("report of"), "{}", made.stderr);
}

/// The label and inclusive percentage of each scope row.
fn labels_and_incl(b: &mut Browser) -> Vec<(String, String)> {
    let v = b.eval(
        "[...document.querySelectorAll('#tree tbody tr.row')].map(r => \
         [r.querySelector('.label').textContent, r.querySelector('td.incl').textContent])",
    );
    serde_json::from_value(v).unwrap()
}

/// Choose thread `value` (-1: all) in the selector, as a person picking it would.
fn choose_thread(b: &mut Browser, value: i32) {
    b.eval(&format!(
        "(() => {{ const s = document.getElementById('thread'); s.value = '{value}'; \
         s.dispatchEvent(new Event('change')); }})()"
    ));
}

#[test]
fn threads_are_chosen_and_charted() {
    let Some(chromium) = chromium() else { return };
    let dir = scratch_dir("view_html_threads");
    let (db, html) = (dir.join("threads.hpcdb"), dir.join("threads.html"));
    two_threads(&db);
    report(&db, &html);
    let mut b = Browser::launch(&chromium, &dir, 1200, 800);
    b.open(&html, "document.body.dataset.ready === 'true'");

    // At load the hot path ends at work's line 11, selected; its file is not on this machine,
    // so the source pane says so and lists the lines with costs only.
    let file = b.eval("document.getElementById('source-file').textContent");
    assert_eq!(
        file,
        "/opt/synth/app.c (source not embedded: not found on the machine that made the report)"
    );
    let lines = b.eval(
        "[...document.querySelectorAll('#source .line')].map(l => \
         [l.dataset.line, l.querySelector('.cost').textContent, l.classList.contains('current')])",
    );
    assert_eq!(
        lines,
        serde_json::json!([["6", "33.3%", false], ["11", "66.7%", true]])
    );

    // The keyboard walks the table.
    let selected = |b: &mut Browser| {
        let v = b.eval(
            "[document.querySelector('#tree tr.selected .label').textContent, \
             document.querySelectorAll('#tree tr.row').length]",
        );
        (v[0].as_str().unwrap().to_string(), v[1].as_u64().unwrap())
    };
    assert_eq!(selected(&mut b), ("app.c: 11".into(), 5));
    b.eval("document.getElementById('table-box').focus()");
    for (key, label, rows) in [
        ("ArrowUp", "work", 5),
        ("ArrowLeft", "work", 4),
        ("ArrowLeft", "main", 4),
        ("ArrowDown", "work", 4),
        ("ArrowRight", "work", 5),
        ("ArrowRight", "app.c: 11", 5),
        ("ArrowDown", "app.c: 6", 5),
        ("ArrowUp", "app.c: 11", 5),
    ] {
        b.press(key);
        assert_eq!(selected(&mut b), (label.into(), rows), "after {key}");
    }

    let options = b.eval("[...document.querySelectorAll('#thread option')].map(o => o.text)");
    assert_eq!(
        options,
        serde_json::json!(["all threads", "tid 100 worker0", "tid 101 worker1"])
    );
    // All threads: work holds 40 of 60 ms.
    let rows = labels_and_incl(&mut b);
    assert!(rows.contains(&("work".into(), "66.7%".into())), "{rows:?}");
    let work = b.eval(
        "[...document.querySelectorAll('tr.row')].find(r => \
         r.querySelector('.label').textContent === 'work').dataset.id",
    );
    b.click(&format!("tr.row[data-id={work}] .label"));
    let bars = b.eval(
        "[...document.querySelectorAll('#threads-chart .bar-row')].map(r => \
         [r.querySelector('.who').textContent, r.querySelector('.value').textContent, \
          Math.round(parseFloat(r.querySelector('.bar').style.width))])",
    );
    assert_eq!(
        bars,
        serde_json::json!([
            ["tid 100 worker0", "10.000ms", 67],
            ["tid 101 worker1", "30.000ms", 200]
        ])
    );
    b.screenshot(&dir.join("threads.png"));

    // One thread: percentages of that thread's total; thread 1 never ran main's own line.
    choose_thread(&mut b, 0);
    let rows = labels_and_incl(&mut b);
    assert!(rows.contains(&("work".into(), "33.3%".into())), "{rows:?}");
    assert!(
        rows.contains(&("app.c: 6".into(), "66.7%".into())),
        "{rows:?}"
    );
    choose_thread(&mut b, 1);
    let rows = labels_and_incl(&mut b);
    assert!(rows.contains(&("work".into(), "100.0%".into())), "{rows:?}");
    assert!(!rows.iter().any(|(l, _)| l == "app.c: 6"), "{rows:?}");

    // Numbers are rounded as the text view (Rust's formatting) rounds them, exact ties to even.
    let values = [12.25, 12.75, 0.25, 0.05, 33.35, 0.0625, 1.0625];
    let page = b.eval(&format!("{values:?}.map(x => [fixed(x, 1), fixed(x, 3)])"));
    let rust: Vec<[String; 2]> = values
        .iter()
        .map(|x| [format!("{x:.1}"), format!("{x:.3}")])
        .collect();
    assert_eq!(page, serde_json::json!(rust));

    // The threshold slider folds rows below it into "(N more)".
    choose_thread(&mut b, -1);
    b.eval(
        "(() => { const t = document.getElementById('threshold'); t.value = '20'; \
         t.dispatchEvent(new Event('input')); })()",
    );
    let rows = labels_and_incl(&mut b);
    assert!(rows.contains(&("work".into(), "66.7%".into())), "{rows:?}");
    assert!(
        rows.contains(&("app.c: 6".into(), "33.3%".into())),
        "{rows:?}"
    );
    assert_eq!(
        b.eval("document.getElementById('threshold-value').textContent"),
        "20%"
    );
}

/// A source file (and a procedure name) quoting every mark of the report's template and
/// `</script>`: the page still renders whole, the text shown as written. Chained replacements
/// put the views inside the data and broke the page ("Uncaught SyntaxError").
#[test]
fn a_source_quoting_the_template_renders_whole() {
    let Some(chromium) = chromium() else { return };
    let dir = scratch_dir("view_html_marks");
    let quoted = "{{DATA}} {{VIEWS}} /*STYLE*/ /*SCRIPT*/ </script><script>";
    let source = dir.join("marks.c");
    let text: String = (1..=6).map(|l| format!("/* {l}: {quoted} */\n")).collect();
    std::fs::write(&source, &text).unwrap();
    let mut b = Builder::for_source(source.to_str().unwrap(), 1);
    let main = b.add(DbNodeId::ROOT, NodeKind::Procedure, "main", 1);
    let odd = b.call(main, 2, quoted, 4);
    let line = b.add(odd, NodeKind::Statement, "", 5);
    b.sample(line, 0, 3);
    let own = b.add(main, NodeKind::Statement, "", 3);
    b.sample(own, 0, 1);
    let (db, html) = (dir.join("marks.hpcdb"), dir.join("marks.html"));
    b.finish(&db);
    report(&db, &html);

    let mut b = Browser::launch(&chromium, &dir, 1200, 800);
    b.open(&html, "document.body.dataset.ready === 'true'");
    let rows = labels_and_incl(&mut b);
    assert!(rows.contains(&(quoted.into(), "75.0%".into())), "{rows:?}");
    assert!(rows.contains(&("main".into(), "100.0%".into())), "{rows:?}");
    let shown = b.eval("[...document.querySelectorAll('#source .line')].map(l => l.textContent)");
    let shown: Vec<String> = serde_json::from_value(shown).unwrap();
    // Six lines of text, and the empty one after the last newline.
    assert_eq!(shown.len(), 7, "{shown:?}");
    assert!(shown[..6].iter().all(|l| l.contains(quoted)), "{shown:?}");
}

/// A database of about `nodes` scopes over `threads` threads: procedures that each hold a loop
/// of five statements and call two more procedures, breadth first, with pseudo-random costs.
fn synthetic(path: &Path, nodes: usize, threads: u32) {
    let mut b = Builder::new(threads);
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut queue = std::collections::VecDeque::from([DbNodeId::ROOT]);
    let mut made = 0usize;
    while let Some(parent) = queue.pop_front() {
        if made >= nodes {
            break;
        }
        for _ in 0..2 {
            let name = format!("proc_{made}");
            let proc = b.add(parent, NodeKind::Procedure, &name, (made % 5000) as u32);
            let lp = b.add(proc, NodeKind::Loop, "", (made % 5000) as u32 + 1);
            for l in 0..5 {
                let line = b.add(lp, NodeKind::Statement, "", (made % 5000) as u32 + 2 + l);
                let thread = (next() % u64::from(threads)) as u32;
                b.sample(line, thread, next() % 20);
            }
            made += 7;
            queue.push_back(proc);
        }
    }
    b.finish(path);
}

/// `scripts/bench-html`: time to write a report of a 100,000-scope database (or
/// `HTML_BENCH_NODES`) and for Chromium to make it interactive, and to answer a search.
#[test]
#[ignore = "a benchmark: run by scripts/bench-html"]
fn bench_report_of_a_large_database() {
    let Some(chromium) = chromium() else { return };
    let nodes = std::env::var("HTML_BENCH_NODES").map_or(100_000, |n| n.parse().unwrap());
    let dir = scratch_dir("view_html_bench");
    let (db, html) = (dir.join("large.hpcdb"), dir.join("large.html"));
    synthetic(&db, nodes, 4);
    tool("hpcview-rs"); // built before the clock starts
    let start = Instant::now();
    report(&db, &html);
    let written = start.elapsed().as_secs_f64();
    let size = std::fs::metadata(&html).unwrap().len() as f64 / (1 << 20) as f64;
    let mut b = Browser::launch(&chromium, &dir, 1400, 900);
    let scopes = Database::read(&db).unwrap().nodes.len();
    let ready = b.open(&html, "document.body.dataset.ready === 'true'");
    let search = b.eval(
        "(() => { const t0 = performance.now(); const s = document.getElementById('search'); \
         s.value = 'proc_9999'; s.dispatchEvent(new Event('input')); \
         return performance.now() - t0; })()",
    );
    let rows = b.eval("document.querySelectorAll('#tree tr').length");
    b.screenshot(&dir.join("large.png"));
    println!(
        "bench-html: {scopes} scopes in the database, report written in {written:.2} s \
         ({size:.1} MiB); interactive in Chromium {:.0} ms after navigation; search \
         {:.0} ms; {rows} table rows in the document",
        ready,
        search.as_f64().unwrap()
    );
}

#[test]
fn report_is_written_atomically_and_alone() {
    let dir = scratch_dir("view_html_write");
    let db = dir.join("app.hpcdb");
    two_threads(&db);
    // A symlink planted at the report's name is replaced, its target left alone.
    let victim = dir.join("victim");
    std::fs::write(&victim, "keep").unwrap();
    let link = dir.join("report.html");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    report(&db, &link);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    let page = std::fs::read_to_string(&link).unwrap();
    assert!(!link.is_symlink() && page.starts_with("<!DOCTYPE html>"));
    assert!(page.contains(r#""threads":["tid 100 worker0","tid 101 worker1"]"#));
    // Another output form alongside is refused, as is a directory that does not exist.
    let html = link.to_str().unwrap();
    let fails = |args: &[&str]| {
        let o = run(tool_command("hpcview-rs").arg(&db).args(args));
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        (o.status.code(), err)
    };
    for args in [
        &["--html", html, "--json"][..],
        &["--html", html, "-o", "x"],
    ] {
        let (code, err) = fails(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains("cannot be used with"), "{args:?}: {err}");
    }
    let missing = dir.join("no/such/dir/r.html");
    let (code, err) = fails(&["--html", missing.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.starts_with("hpcview-rs: error: writing the HTML report") && err.lines().count() == 1,
        "{err}"
    );
}
