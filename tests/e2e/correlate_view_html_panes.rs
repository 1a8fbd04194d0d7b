//! `hpcview-rs --html` on a database with data objects and traces (`hpcrun-rs -t --data` on the
//! footprint fixture, whose functions touch 768 pages of `A`, 256 of `B` and 32 of `C`, in that
//! order): the report gets a data objects' tab, a timeline tab and a memory map tab, opened in
//! headless Chromium and checked against `hpcview-rs --data --json` and the CLI's timeline and
//! memory map pictures; and the same report used in headless Firefox.

use std::path::{Path, PathBuf};

use crate::browser::{chromium, Browser};
use crate::correlate_view_support::{find, run_view};
use crate::firefox::{firefox, Firefox};
use crate::support::{compile, run_ok, scratch_dir, tool, tool_command};

/// The footprint fixture measured with `hpcrun-rs -t -e page-faults@1 --data`, correlated, and
/// its report written; returns the scratch directory, the database and the report.
fn traced_data_report(test: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = scratch_dir(test);
    let flags = ["-O2", "-g", "-fno-stack-clash-protection"];
    let exe = compile("footprint.c", &dir, "footprint", &flags);
    let profile = dir.join("fp.db");
    let args = [
        "-q",
        "-t",
        "-e",
        "page-faults@1",
        "--data",
        "--buffer-kib",
        "32768",
    ];
    run_ok(
        tool_command("hpcrun-rs")
            .args(args)
            .arg("-o")
            .arg(&profile)
            .arg(&exe),
    );
    let db = dir.join("fp.hpcdb");
    run_ok(tool_command("hpcprof-rs").arg(&profile).arg("-o").arg(&db));
    let html = dir.join("fp.html");
    let made = run_view(
        &tool("hpcview-rs"),
        &db,
        &["--html", html.to_str().unwrap()],
    );
    assert!(
        made.stderr
            .contains("data objects, a timeline, a memory map,"),
        "{}",
        made.stderr
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(!page.contains("http://") && !page.contains("https://"));
    (dir, db, html)
}

/// The objects of `hpcview-rs --data --json`: (name, data samples of the first metric).
fn data_objects(db: &Path) -> Vec<(String, String)> {
    let json = run_view(&tool("hpcview-rs"), db, &["--data", "--json"]).json();
    json["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["name"].as_str().unwrap().to_string(),
                o["samples"][0].to_string(),
            )
        })
        .collect()
}

/// The data objects' table as shown: (label, samples of the first metric) per row.
const OBJECT_ROWS: &str = "[...document.querySelectorAll('#objects tbody tr')].map((r) => \
     [r.cells[0].textContent, r.cells[4].textContent])";

/// The shown rows are `expected`'s (labels are the --data view's: the name with any receiver
/// hint, clipped with `…`), `A` (768 pages) first.
fn check_objects(shown: &[(String, String)], expected: &[(String, String)]) {
    assert_eq!(shown.len(), expected.len(), "{shown:?}");
    assert_eq!(shown[0].0, "A", "{shown:?}");
    for ((name, samples), (label, n)) in expected.iter().zip(shown) {
        let stem = label.trim_end_matches('…');
        assert!(
            label.starts_with(name.as_str()) || name.starts_with(stem),
            "{label} for {name}"
        );
        assert_eq!(samples, n, "{name}");
    }
}

#[test]
fn data_objects_and_timeline_panes_in_chromium() {
    let Some(chromium) = chromium() else { return };
    let (dir, db, html) = traced_data_report("view_html_panes");
    let mut b = Browser::launch(&chromium, &dir, 1400, 900);
    b.open(&html, "document.body.dataset.ready === 'true'");
    let hidden = "[...document.querySelectorAll('.tab[data-pane]')].map((t) => t.hidden)";
    assert_eq!(
        b.eval(hidden),
        serde_json::json!([false, false, false, false])
    );

    // Data objects: the rows of --data --json, most samples first, A leading.
    b.click(".tab[data-pane=\"objects\"]");
    let shown: Vec<(String, String)> = serde_json::from_value(b.eval(OBJECT_ROWS)).unwrap();
    check_objects(&shown, &data_objects(&db));
    let visible =
        "[document.querySelector('main').hidden, document.getElementById('objects-pane').hidden]";
    assert_eq!(b.eval(visible), serde_json::json!([true, false]));
    b.screenshot(&dir.join("objects.png"));

    // Timeline: the picture `hpcview-rs --timeline --svg` draws at 100 text columns (800
    // pixels; tested in trace_timeline), inline without its namespace, and shown.
    check_picture(&mut b, &dir, &db, "timeline", "touch_a");
    // Memory map: the picture `hpcview-rs --memmap --svg` draws, A's band first.
    check_picture(
        &mut b,
        &dir,
        &db,
        "memmap",
        "A  (768 samples, pages 0 to 767)",
    );

    // Back to a view: the tree is shown again, the panes hidden.
    b.click(".tab[data-view=\"0\"]");
    assert_eq!(b.eval(visible), serde_json::json!([false, true]));
}

/// The pane `name` (`timeline` or `memmap`) shows the picture `hpcview-rs --NAME --columns 100
/// --svg` draws (800 pixels wide), inline without its namespace, with `words` in it.
fn check_picture(b: &mut Browser, dir: &Path, db: &Path, name: &str, words: &str) {
    let svg_file = dir.join(format!("{name}.svg"));
    let flag = format!("--{name}");
    let args = [
        &flag,
        "--columns",
        "100",
        "--svg",
        svg_file.to_str().unwrap(),
    ];
    run_view(&tool("hpcview-rs"), db, &args);
    let svg = std::fs::read_to_string(&svg_file).unwrap();
    let svg = svg.replacen(r#" xmlns="http://www.w3.org/2000/svg""#, "", 1);
    b.click(&format!(".tab[data-pane=\"{name}\"]"));
    assert_eq!(b.eval(&format!("D.{name}")).as_str(), Some(svg.as_str()));
    let rects = format!("document.querySelectorAll('#{name}-pane svg rect').length");
    assert_eq!(
        b.eval(&rects).as_u64(),
        Some(svg.matches("<rect ").count() as u64)
    );
    let text = b.eval(&format!(
        "document.getElementById('{name}-pane').textContent"
    ));
    assert!(text.as_str().unwrap().contains(words), "{text}");
    b.screenshot(&dir.join(format!("{name}.png")));
}

/// The same report in headless Firefox (Marionette): the tree's hot path with --json's
/// percentage, the tabs, a search typed in, both panes, and no resource fetched.
#[test]
fn report_in_firefox() {
    let Some(firefox) = firefox() else { return };
    let (dir, db, html) = traced_data_report("view_html_firefox");
    let mut ff = Firefox::launch(&firefox, &dir);
    ff.open(&html, "document.body.dataset.ready === 'true'");
    let rows = "[...document.querySelectorAll('#tree tbody tr.row')].map((r) => \
                [r.querySelector('.label').textContent, r.querySelector('td.incl').textContent])";
    let shown: Vec<(String, String)> = serde_json::from_value(ff.eval(rows)).unwrap();
    assert_eq!(shown[0], ("<program root>".into(), "100.0%".into()));
    let json = run_view(&tool("hpcview-rs"), &db, &["--json"]).json();
    let total = json["metrics"][0]["total"].as_u64().unwrap();
    let touch = find(&json["root"], &|n| n["name"] == "touch_a").expect("touch_a in --json");
    let pct = touch["incl"][0].as_u64().unwrap() as f64 * 100.0 / total as f64;
    let row = shown.iter().find(|r| r.0 == "touch_a");
    assert_eq!(
        row.map(|r| r.1.clone()),
        Some(format!("{pct:.1}%")),
        "touch_a on the hot path: {shown:?}"
    );
    ff.screenshot(&dir.join("firefox-top-down.png"));

    ff.click(".tab[data-view=\"2\"]");
    let flat: Vec<(String, String)> = serde_json::from_value(ff.eval(rows)).unwrap();
    assert!(flat.iter().any(|r| r.0 == "footprint"), "{flat:?}");
    ff.type_into("#search", "touch_b");
    let count = ff.eval("document.getElementById('search-count').textContent");
    assert!(
        count
            .as_str()
            .is_some_and(|c| c.ends_with(" matches") && !c.starts_with("0 ")),
        "{count}"
    );
    let marked = ff.eval("[...document.querySelectorAll('#tree mark')].map((m) => m.textContent)");
    assert!(
        marked
            .as_array()
            .is_some_and(|m| !m.is_empty() && m.iter().all(|t| t == "touch_b")),
        "{marked}"
    );

    ff.click(".tab[data-pane=\"objects\"]");
    let shown: Vec<(String, String)> = serde_json::from_value(ff.eval(OBJECT_ROWS)).unwrap();
    check_objects(&shown, &data_objects(&db));
    for name in ["timeline", "memmap"] {
        ff.click(&format!(".tab[data-pane=\"{name}\"]"));
        let rects = ff.eval(&format!(
            "document.querySelectorAll('#{name}-pane svg rect').length"
        ));
        let drawn = ff.eval(&format!(
            "(JSON.parse(document.getElementById('data').textContent).{name} \
             .match(/<rect /g) || []).length"
        ));
        assert!(
            rects.as_u64().is_some_and(|n| n > 0) && rects == drawn,
            "{name}: {rects} {drawn}"
        );
        ff.screenshot(&dir.join(format!("firefox-{name}.png")));
    }
    let fetched = ff.eval("performance.getEntriesByType('resource').map((r) => r.name)");
    assert_eq!(fetched, serde_json::json!([]), "nothing fetched");
}
