//! `hpcview-rs --html`: the report of the STL map program opened in headless Chromium and used
//! as a person would (clicks, typing), the document checked after each action against
//! `hpcview-rs --json` and the library's own per-line costs. Screenshots of each tab are left in
//! the test's scratch directory.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::browser::{chromium, Browser};
use crate::correlate_view_support::{find, measured_database, run_view};
use crate::support::tool;
use correlate::render::source;
use correlate::{Database, Selection, ViewKind, ViewTree};

/// Measure the STL map fixture and correlate it; returns the scratch directory and database.
fn stlmap_database(test: &str) -> (PathBuf, PathBuf) {
    measured_database(test, "stlmap.cc", "stlmap", &["-O2", "-g"], &["400000"])
}

/// `value` as a percentage of `total`, as the text view and the report print it.
fn pct(value: u64, total: u64) -> String {
    format!("{:.1}%", value as f64 * 100.0 / total as f64)
}

/// Nodes of a JSON view whose name contains `needle` (case-insensitive).
fn count_named(node: &Value, needle: &str) -> usize {
    let here = node["name"]
        .as_str()
        .is_some_and(|n| n.to_lowercase().contains(needle)) as usize;
    here + node["children"]
        .as_array()
        .map_or(0, |c| c.iter().map(|c| count_named(c, needle)).sum())
}

/// One row of the report's tree table as the document shows it.
#[derive(Debug)]
struct Row {
    id: u64,
    depth: usize,
    label: String,
    incl: String,
    excl: String,
    expanded: bool,
    /// The label in full (the table shortens long procedure names).
    full: String,
    /// The call site, as `(file: line)`.
    site: Option<String>,
}

/// The scope rows in the document, in order.
fn rows(b: &mut Browser) -> Vec<Row> {
    let v = b.eval(
        "[...document.querySelectorAll('#tree tbody tr.row')].map(r => [Number(r.dataset.id), \
         Number(r.dataset.depth), r.querySelector('.label').textContent, \
         r.querySelector('td.incl').textContent, r.querySelector('td.excl').textContent, \
         r.querySelector('.toggle').textContent === '▾', \
         r.querySelector('td.name').title || r.querySelector('.label').textContent, \
         r.querySelector('.site')?.textContent ?? null])",
    );
    v.as_array()
        .expect("rows")
        .iter()
        .map(|r| Row {
            id: r[0].as_u64().unwrap(),
            depth: r[1].as_u64().unwrap() as usize,
            label: r[2].as_str().unwrap().into(),
            incl: r[3].as_str().unwrap().into(),
            excl: r[4].as_str().unwrap().into(),
            expanded: r[5].as_bool().unwrap(),
            full: r[6].as_str().unwrap().into(),
            site: r[7].as_str().map(String::from),
        })
        .collect()
}

/// The rows below `rows[at]` (its shown descendants).
fn below(rows: &[Row], at: usize) -> usize {
    rows[at + 1..]
        .iter()
        .take_while(|r| r.depth > rows[at].depth)
        .count()
}

fn text(b: &mut Browser, selector: &str) -> String {
    let js = format!(
        "document.querySelector({}).textContent",
        serde_json::json!(selector)
    );
    b.eval(&js).as_str().unwrap_or_default().to_string()
}

/// Open the report at `html` in a fresh headless Chromium.
fn open(chromium: &Path, dir: &Path, html: &Path) -> Browser {
    let mut b = Browser::launch(chromium, dir, 1400, 900);
    b.open(html, "document.body.dataset.ready === 'true'");
    b
}

#[test]
fn stl_map_report_in_chromium() {
    let Some(chromium) = chromium() else { return };
    let (dir, db) = stlmap_database("view_html_stlmap");
    let html = dir.join("stlmap.html");
    let made = run_view(
        &tool("hpcview-rs"),
        &db,
        &["--html", html.to_str().unwrap()],
    );
    assert!(made.stderr.contains("report of"), "{}", made.stderr);
    assert!(made.stdout.is_empty(), "the report goes to the file only");
    // Outside its data (whose embedded sources may quote addresses in comments), the page
    // names no web address; the browser is checked for requests below.
    let page = std::fs::read_to_string(&html).unwrap();
    let (markup, data) = page
        .split_once("<script type=\"application/json\" id=\"data\">")
        .expect("the data element");
    let code = data
        .split_once("</script>")
        .expect("the data element's end")
        .1;
    for part in [markup, code] {
        assert!(!part.contains("http://") && !part.contains("https://"));
    }
    let json = run_view(&tool("hpcview-rs"), &db, &["--json"]).json();
    let total = json["metrics"][0]["total"].as_u64().unwrap();
    let lp = find(&json["root"], &|n| n["kind"] == "loop" && n["line"] == 18)
        .expect("the loop at line 18 in --json");
    let lp_incl = pct(lp["incl"][0].as_u64().unwrap(), total);
    let lp_excl = lp["excl"][0].as_u64().unwrap();

    let mut b = open(&chromium, &dir, &html);
    b.screenshot(&dir.join("top-down.png"));
    // Neither data objects nor traces were measured: their tabs (data objects, timeline,
    // memory map) are not shown; the machine code of the hottest procedures is.
    let hidden = "[...document.querySelectorAll('.tab[data-pane]')].map((t) => t.hidden)";
    assert_eq!(b.eval(hidden), serde_json::json!([true, true, true, false]));

    // The hot path is expanded at load, through the second loop, with --json's percentages.
    let r = rows(&mut b);
    assert_eq!(
        (r[0].label.as_str(), r[0].incl.as_str()),
        ("<program root>", "100.0%")
    );
    let at = r
        .iter()
        .position(|r| r.label == "loop at stlmap.cc: 18")
        .unwrap_or_else(|| panic!("the loop's row on the expanded path: {r:#?}"));
    assert!(r[at].expanded && below(&r, at) > 0, "{r:#?}");
    assert_eq!(r[at].incl, lp_incl, "inclusive %, as --json");
    let excl_text = if lp_excl == 0 {
        String::new()
    } else {
        pct(lp_excl, total)
    };
    assert_eq!(r[at].excl, excl_text, "exclusive %, as --json");
    // Each row as the text view prints it, at the same depth (the text view expands every
    // scope above the threshold, the report the hot path).
    let text_rows = run_view(&tool("hpcview-rs"), &db, &["--color", "never"]).rows();
    for row in &r {
        let shown = match &row.site {
            Some(site) => format!("{}  {site}", row.label),
            None => row.label.clone(),
        };
        assert!(
            text_rows.contains(&(row.depth, shown.clone())),
            "{shown:?} at depth {} is not in the text view: {text_rows:#?}",
            row.depth
        );
    }
    let path: Vec<usize> = r[..=at].iter().map(|r| r.depth).collect();
    assert!(
        r[..at]
            .iter()
            .filter(|x| x.depth < r[at].depth)
            .all(|x| x.expanded),
        "the rows above the loop are expanded: {path:?}"
    );

    // Collapse the loop by its toggle: its rows leave the document; expand: they come back.
    let loop_id = r[at].id;
    let toggle = format!("tr.row[data-id=\"{loop_id}\"] .toggle");
    let shown = below(&r, at);
    b.click(&toggle);
    let r2 = rows(&mut b);
    let at2 = r2.iter().position(|x| x.id == loop_id).unwrap();
    assert!(!r2[at2].expanded);
    assert_eq!(
        below(&r2, at2),
        0,
        "collapsed: nothing shown below the loop"
    );
    assert_eq!(r2.len(), r.len() - shown);
    b.click(&toggle);
    assert_eq!(rows(&mut b).len(), r.len(), "expanded again");

    // Select the loop: the source pane shows stlmap.cc at line 18 with the line's cost.
    b.click(&format!("tr.row[data-id=\"{loop_id}\"] .label"));
    assert_eq!(
        text(&mut b, "#tree tr.selected .label"),
        "loop at stlmap.cc: 18"
    );
    assert!(text(&mut b, "#source-file").ends_with("stlmap.cc"));
    let line = b.eval(
        "(() => { const l = document.querySelector('#source .line.current'); \
         return [l.dataset.line, l.querySelector('.cost').textContent, l.textContent]; })()",
    );
    let database = Database::read(&db).unwrap();
    let flat = ViewTree::from_database(&database, ViewKind::Flat, &Selection::All);
    let costs = source::file_costs(&flat, "stlmap.cc").unwrap();
    assert_eq!(line[0], "18");
    assert_eq!(
        line[1],
        pct(costs.lines[&18].incl[0], total).as_str(),
        "as --source"
    );
    assert!(line[2]
        .as_str()
        .unwrap()
        .contains("for (long i = 0; i < n; i++)"));
    // The flame graph follows the selection; clicking a frame selects it in the table.
    let frame = b.eval("document.querySelector('#flame .frame.selected').dataset.id");
    assert_eq!(frame, loop_id.to_string().as_str());
    // Clicking a frame zooms to it (it spans the graph's width, on top); clicking the top
    // frame zooms out one level.
    let top_frame = "(() => { const f = document.querySelector('#flame .frame'); \
        return [f.dataset.id, Math.round(f.getBoundingClientRect().width), \
        document.getElementById('flame').clientWidth]; })()";
    b.click(&format!("#flame .frame[data-id=\"{loop_id}\"]"));
    let top = b.eval(top_frame);
    assert_eq!(top[0], loop_id.to_string().as_str(), "zoomed to the loop");
    assert_eq!(top[1], top[2], "the loop spans the flame graph");
    assert_eq!(
        text(&mut b, "#tree tr.selected .label"),
        "loop at stlmap.cc: 18"
    );
    b.click(&format!("#flame .frame[data-id=\"{loop_id}\"]"));
    assert_ne!(
        b.eval(top_frame)[0],
        loop_id.to_string().as_str(),
        "zoomed out"
    );
    b.click("#collapse");
    assert_eq!(text(&mut b, "#tree tr.selected .label"), "<program root>");
    let collapsed = rows(&mut b);
    assert!(
        collapsed.len() >= 2 && collapsed.iter().all(|r| r.depth <= 1),
        "{collapsed:#?}"
    );
    b.click("#hot");
    assert_eq!(
        rows(&mut b).len(),
        r.len(),
        "the hot path again, as at load"
    );

    // Search: every match counted, shown (ancestors expanded) and marked.
    b.type_into("#search", "_M_erase");
    let expected = count_named(&json["root"], "_m_erase");
    assert_eq!(text(&mut b, "#search-count"), format!("{expected} matches"));
    assert!(expected > 0, "the map's destructor (_M_erase) was sampled");
    let rows_matching = b.eval("document.querySelectorAll('#tree tr.row.match').length");
    assert_eq!(rows_matching, expected.min(500), "each match is shown");
    let marked = b.eval("[...document.querySelectorAll('#tree mark')].map(m => m.textContent)");
    let marked = marked.as_array().unwrap();
    assert_eq!(
        marked.len(),
        expected.min(500),
        "each match is shown and marked"
    );
    assert!(marked.iter().all(|m| m == "_M_erase"));
    b.screenshot(&dir.join("search.png"));

    // Sort by exclusive cost: siblings in descending exclusive order.
    b.click("th[data-m=\"0\"][data-excl=\"true\"]");
    assert_eq!(
        text(&mut b, "th.sorted"),
        format!("{} (E)", json["metrics"][0]["name"].as_str().unwrap())
    );
    check_sibling_order(&rows(&mut b), |r| &r.excl);

    // The other tabs, each as its --json says.
    for (tab, flag, shot) in [
        ("2", "--flat", "flat.png"),
        ("1", "--callers", "callers.png"),
    ] {
        b.click("th[data-m=\"0\"][data-excl=\"false\"]");
        b.click(&format!(".tab[data-view=\"{tab}\"]"));
        let view = run_view(&tool("hpcview-rs"), &db, &[flag, "--json"]).json();
        let first = &view["root"]["children"][0];
        let r = rows(&mut b);
        let top: Vec<&Row> = r.iter().filter(|r| r.depth == 1).collect();
        let name = first["name"].as_str().unwrap();
        assert!(
            name.ends_with(top[0].full.trim_start_matches("[I] ")),
            "{flag}: first row {:?} is --json's first child {name}",
            top[0].label
        );
        assert_eq!(top[0].incl, pct(first["incl"][0].as_u64().unwrap(), total));
        check_sibling_order(&r, |r| &r.incl);
        b.screenshot(&dir.join(shot));
    }
    assert_eq!(text(&mut b, ".tab.active"), "Callers");

    let urls = b.requested_urls();
    assert!(!urls.is_empty(), "the page's own load was recorded");
    assert!(
        urls.iter()
            .all(|u| u.starts_with("file:") || u.starts_with("data:")),
        "nothing fetched from the network: {urls:?}"
    );
}

/// Rows that share a parent are in descending order of the column `key` picks (a percentage;
/// blank is zero).
fn check_sibling_order(rows: &[Row], key: impl Fn(&Row) -> &String) {
    let value = |r: &Row| key(r).trim_end_matches('%').parse::<f64>().unwrap_or(0.0);
    // For each depth, the value of the previous sibling at that depth (reset on a new parent).
    let mut last: Vec<Option<f64>> = Vec::new();
    for r in rows {
        last.truncate(r.depth + 1);
        last.resize(r.depth + 1, None);
        if let Some(prev) = last[r.depth] {
            assert!(
                prev >= value(r),
                "{:?} after a sibling at {prev}: {rows:#?}",
                r.label
            );
        }
        last[r.depth] = Some(value(r));
    }
}
