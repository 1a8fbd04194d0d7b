//! The `--json` output: a view serialized exactly as DESIGN.md specifies.
//!
//! The shape is defined once, by `write_fields` and [`render`]: `metrics`, `view`, and a
//! `root` node whose nodes carry `kind`, `name`, optional `module`, `file`, `line`, `end_line`,
//! `call_file` and `call_line`, `incl` and `excl` (one number per metric, in event units) and
//! `children` in display order (inclusive cost, descending). A view with derived metrics
//! (`--metric 'NAME = FORMULA'`) also has `derived` (each one's `name` and `formula`) and, per
//! node, `derived_incl` and `derived_excl` (one number per derived metric, `null` where its
//! formula has no value, e.g. a division by zero).
//!
//! The nodes are written straight from the [`ViewTree`] by a loop over an explicit stack rather
//! than by a recursive serializer, so a view hundreds of thousands of levels deep is written on
//! an ordinary thread stack, in time linear in its size: indentation stops growing at
//! `MAX_INDENT_LEVELS` levels. Strings and numbers are written by
//! `serde_json`, which escapes them.

use std::io::{self, Write};

use profiler::db::Cost;
use serde::Serialize;

use super::indent;
use crate::db::node::NodeKind;
use crate::view::tree::{ViewNode, ViewTree};

/// Write `view` as indented JSON followed by a newline.
pub fn render(view: &ViewTree, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "{{")?;
    write!(out, "  \"metrics\": ")?;
    value(out, &view.metrics)?;
    if !view.derived.is_empty() {
        let derived: Vec<_> = (view.derived.iter())
            .map(|d| serde_json::json!({"name": d.name, "formula": d.formula}))
            .collect();
        write!(out, ",\n  \"derived\": ")?;
        value(out, &derived)?;
    }
    write!(out, ",\n  \"view\": ")?;
    value(out, &view.view)?;
    write!(out, ",\n  \"root\": ")?;
    nodes(view, out)?;
    writeln!(out, "\n}}")
}

/// What is left to write, on the explicit stack.
enum Step {
    /// Open node `id` at nesting `level`; `first` if it is the first of its siblings.
    Open {
        id: usize,
        level: usize,
        first: bool,
    },
    /// Close the children list and the object of a node at `level` that has children.
    Close { level: usize },
}

/// Write the tree from the root, depth first.
fn nodes(view: &ViewTree, out: &mut dyn Write) -> io::Result<()> {
    let mut stack = vec![Step::Open {
        id: 0,
        level: 1,
        first: true,
    }];
    while let Some(step) = stack.pop() {
        match step {
            Step::Open { id, level, first } => {
                let n = &view.nodes[id];
                if !first {
                    write!(out, ",\n{}", indent(level))?;
                }
                writeln!(out, "{{")?;
                write_fields(n, level + 1, out)?;
                write_derived(view, n, level + 1, out)?;
                write!(out, "{}\"children\": [", indent(level + 1))?;
                if n.children.is_empty() {
                    write!(out, "]\n{}}}", indent(level))?;
                    continue;
                }
                write!(out, "\n{}", indent(level + 2))?;
                stack.push(Step::Close { level });
                stack.extend(
                    n.children
                        .iter()
                        .enumerate()
                        .rev()
                        .map(|(i, &c)| Step::Open {
                            id: c,
                            level: level + 2,
                            first: i == 0,
                        }),
                );
            }
            Step::Close { level } => {
                write!(out, "\n{}]\n{}}}", indent(level + 1), indent(level))?;
            }
        }
    }
    Ok(())
}

/// Write every field of node `n` but its children, one per line at nesting `level`, each
/// followed by a comma; optional fields only where known.
fn write_fields(n: &ViewNode, level: usize, out: &mut dyn Write) -> io::Result<()> {
    let pad = indent(level);
    let mut field = |key: &str, json: &str| writeln!(out, "{pad}\"{key}\": {json},");
    field("kind", &string(contract_kind(n.kind)))?;
    field("name", &string(&n.name))?;
    let optional = [
        ("module", n.module.as_deref().map(string)),
        ("file", n.file.as_deref().map(string)),
        ("line", n.line.map(|l| l.to_string())),
        ("end_line", n.end_line.map(|l| l.to_string())),
        ("call_file", n.call_file.as_deref().map(string)),
        ("call_line", n.call_line.map(|l| l.to_string())),
    ];
    for (key, json) in optional {
        if let Some(json) = json {
            field(key, &json)?;
        }
    }
    field("incl", &values(&n.incl))?;
    field("excl", &values(&n.excl))
}

/// The derived metrics' values of node `n` (where the view has any): `derived_incl` and
/// `derived_excl`, one number per derived metric, `null` where the formula has no value.
fn write_derived(
    view: &ViewTree,
    n: &ViewNode,
    level: usize,
    out: &mut dyn Write,
) -> io::Result<()> {
    if view.derived.is_empty() {
        return Ok(());
    }
    let pad = indent(level);
    for (key, costs) in [("derived_incl", &n.incl), ("derived_excl", &n.excl)] {
        let list: Vec<serde_json::Value> = (view.derived.iter())
            .map(|d| d.value(costs).into())
            .collect();
        writeln!(out, "{pad}\"{key}\": {},", serde_json::Value::from(list))?;
    }
    Ok(())
}

/// A string as a JSON string literal (quoted, escaped).
fn string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// Write one value as compact JSON.
fn value(out: &mut dyn Write, v: &impl Serialize) -> io::Result<()> {
    serde_json::to_writer(out, v).map_err(io::Error::from)
}

/// The contract's kinds: `<kernel>` is a procedure, `<partial call paths>` an unknown scope
/// (it has no structure).
pub(crate) fn contract_kind(kind: NodeKind) -> &'static str {
    match kind {
        NodeKind::Root => "root",
        NodeKind::Procedure | NodeKind::Kernel => "procedure",
        NodeKind::Inlined => "inlined",
        NodeKind::Loop => "loop",
        NodeKind::Statement => "statement",
        NodeKind::Module => "module",
        NodeKind::File => "file",
        NodeKind::DataObject => "data-object",
        NodeKind::Partial | NodeKind::Unknown => "unknown",
    }
}

/// Costs as the contract writes them: a JSON array of one value per metric, in event units.
fn values(costs: &[Cost]) -> String {
    let list: Vec<String> = costs.iter().map(|c| c.value.to_string()).collect();
    format!("[{}]", list.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::tree::{MetricInfo, ViewKind};

    fn cost(value: u64) -> Cost {
        Cost { samples: 1, value }
    }

    #[test]
    fn output_has_the_contract_fields() {
        let mut root = ViewNode::new(NodeKind::Root, "<program root>", 1);
        root.incl[0] = cost(7);
        let metrics = vec![MetricInfo {
            name: "cpu-clock".into(),
            unit: "ns".into(),
            period: None,
            total: 7,
            samples: 1,
            read_with: None,
        }];
        let mut view = ViewTree::new(ViewKind::Flat, metrics, root);
        let mut f = ViewNode::new(NodeKind::Procedure, "f", 1);
        f.incl[0] = cost(7);
        f.excl[0] = cost(7);
        f.call_file = Some("a.c".into());
        f.call_line = Some(3);
        view.push(0, f);
        let mut lp = ViewNode::new(NodeKind::Loop, "loop at app.cc: 19", 1);
        lp.file = Some("/src/app.cc".into());
        lp.line = Some(19);
        view.push(1, lp);
        view.push(0, ViewNode::new(NodeKind::Kernel, "<kernel>", 1));
        view.push(
            0,
            ViewNode::new(NodeKind::Partial, "<partial call paths>", 1),
        );
        let mut out = Vec::new();
        render(&view, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["view"], "flat");
        assert_eq!(v["metrics"][0]["period"], serde_json::Value::Null);
        assert_eq!(v["root"]["kind"], "root");
        let f = &v["root"]["children"][0];
        assert_eq!(
            (&f["name"], &f["call_line"], &f["excl"][0]),
            (&"f".into(), &3.into(), &7.into())
        );
        let lp = &f["children"][0];
        assert_eq!((&lp["kind"], &lp["line"]), (&"loop".into(), &19.into()));
        assert!(lp.get("call_line").is_none());
        assert!(lp.get("own").is_none());
        assert_eq!(v["root"]["children"][1]["kind"], "procedure");
        assert_eq!(v["root"]["children"][2]["kind"], "unknown");
        let view = serde_json::to_value(ViewKind::TopDown).unwrap();
        assert_eq!(view, "top-down");
    }
}
