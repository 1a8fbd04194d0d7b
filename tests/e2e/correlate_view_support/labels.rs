//! One name per scope: for every node of a view, the label the text view prints equals the
//! label derived from the node's `--json` form by hpcviewer's rules. Shared by the view tests
//! (through `hpcview-rs`) and the correlation tests (through the library).

use correlate::render::{json, text};
use correlate::{Database, Selection, ViewKind, ViewTree};
use serde_json::{Map, Value};

/// The text view's rows as (depth, label), read from the indentation under the `scope`
/// heading.
pub fn text_rows(text: &str) -> Vec<(usize, String)> {
    let mut lines = text.lines();
    let start = lines
        .by_ref()
        .find_map(|l| l.find("  scope").map(|i| i + 2))
        .expect("a heading with `scope`");
    lines
        .filter(|l| l.len() > start)
        .map(|l| {
            let label = &l[start..];
            let trimmed = label.trim_start();
            ((label.len() - trimmed.len()) / 2, trimmed.to_string())
        })
        .collect()
}

/// The rows a view's `--json` output gives: its nodes depth first, in the order of `children`,
/// as (depth, label by [`json_label`]). Read by a small scanner rather than by `serde_json`,
/// whose parser stops at 128 levels of nesting, which call paths through recursion exceed.
pub fn json_rows(json: &str) -> Vec<(usize, String)> {
    let mut nodes: Vec<(usize, Map<String, Value>)> = Vec::new();
    let mut open: Vec<Open> = Vec::new();
    let mut key: Option<String> = None;
    let mut expect_key = false;
    let mut rest = json.trim_start();
    while let Some(c) = rest.chars().next() {
        let len = match c {
            '{' => {
                let is_node = key.as_deref() == Some("root")
                    || matches!(open.last(), Some(Open::Array { children: true }));
                let node = is_node.then(|| {
                    let depth = open.iter().filter(|o| matches!(o, Open::Object(Some(_))));
                    nodes.push((depth.count(), Map::new()));
                    nodes.len() - 1
                });
                open.push(Open::Object(node));
                expect_key = true;
                1
            }
            '[' => {
                let children = key.as_deref() == Some("children");
                open.push(Open::Array { children });
                1
            }
            '}' | ']' => {
                open.pop();
                1
            }
            ':' => 1,
            ',' => {
                expect_key = matches!(open.last(), Some(Open::Object(_)));
                1
            }
            _ => {
                let len = scalar_len(rest);
                let value: Value = serde_json::from_str(&rest[..len]).expect("a JSON scalar");
                if expect_key {
                    key = value.as_str().map(str::to_string);
                    expect_key = false;
                } else if let (Some(Open::Object(Some(node))), Some(k)) = (open.last(), &key) {
                    nodes[*node].1.insert(k.clone(), value);
                }
                len
            }
        };
        rest = rest[len..].trim_start();
    }
    nodes
        .into_iter()
        .map(|(depth, fields)| (depth, json_label(&Value::Object(fields))))
        .collect()
}

/// A JSON container being read: an object (with its index among the view's nodes if it is
/// one), or an array (whether it holds a node's children).
enum Open {
    Object(Option<usize>),
    Array { children: bool },
}

/// The length of the JSON string, number or literal at the start of `text`.
fn scalar_len(text: &str) -> usize {
    if !text.starts_with('"') {
        return text
            .find(|c: char| c == ',' || c == '}' || c == ']' || c.is_whitespace())
            .unwrap_or(text.len());
    }
    let mut escaped = false;
    for (i, c) in text.char_indices().skip(1) {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return i + 1,
            _ => {}
        }
    }
    panic!("unterminated JSON string: {text}")
}

/// The label hpcviewer's rules give a JSON node: `[I] ` before inlined code, the last path
/// component of a module or file, the name otherwise; then, for procedures and inlined code
/// with a known call site, `  (FILE: LINE)` (`unknown file: LINE` without a file).
pub fn json_label(node: &Value) -> String {
    let kind = node["kind"].as_str().expect("kind");
    let name = node["name"].as_str().expect("name");
    let base = |path: &str| path.rsplit('/').next().unwrap_or(path).to_string();
    let mut label = match kind {
        "inlined" => format!("[I] {name}"),
        "module" | "file" => base(name),
        _ => name.to_string(),
    };
    let site = node["call_line"].as_u64();
    if let (Some(line), "procedure" | "inlined") = (site, kind) {
        let file = node["call_file"]
            .as_str()
            .map_or("unknown file".into(), base);
        label.push_str(&format!("  ({file}: {line})"));
    }
    label
}

/// Text (printed with `--threshold 0 --full-names`) and JSON of one view name every node alike.
pub fn assert_labels_agree(text: &str, json: &str) {
    let (text, json) = (text_rows(text), json_rows(json));
    assert_eq!(text.len(), json.len(), "as many text rows as JSON nodes");
    for (t, j) in text.iter().zip(&json) {
        assert_eq!(t, j, "text row (depth, label) vs the JSON node's");
    }
}

/// Every view of `db`, rendered by the library as text and as JSON, names every node alike.
pub fn check_labels(db: &Database) {
    let opts = text::TextOptions {
        threshold_pct: 0.0,
        name_width: None,
        ..text::TextOptions::default()
    };
    for kind in [ViewKind::TopDown, ViewKind::Callers, ViewKind::Flat] {
        let view = ViewTree::from_database(db, kind, &Selection::All);
        let mut shown = Vec::new();
        text::render(&view, &opts, &mut shown).unwrap();
        let mut written = Vec::new();
        json::render(&view, &mut written).unwrap();
        let utf8 = |bytes| String::from_utf8(bytes).unwrap();
        assert_labels_agree(&utf8(shown), &utf8(written));
    }
}
