//! The `--json` output: a view serialized exactly as DESIGN.md specifies.
//!
//! The shape is defined once, by the fields of `JsonNode` below: `metrics`, `view`, and a `root` node
//! whose nodes carry `kind`, `name`, optional `module`, `file`, `line`, `end_line`, `call_file`
//! and `call_line`, `incl` and `excl` (one number per metric, in event units) and `children` in
//! display order (inclusive cost, descending). The nodes are written straight from the
//! [`ViewTree`], not copied.

use std::io::{self, Write};

use profiler::db::Cost;
use serde::{Serialize, Serializer};

use crate::database::NodeKind;
use crate::view::{MetricInfo, ViewKind, ViewTree};

/// Write `view` as pretty-printed JSON followed by a newline.
pub fn render(view: &ViewTree, out: &mut dyn Write) -> io::Result<()> {
    let json = JsonView {
        metrics: &view.metrics,
        view: view.view,
        root: JsonNode::of(view, 0),
    };
    serde_json::to_writer_pretty(&mut *out, &json)?;
    writeln!(out)
}

/// The top level of the contract.
#[derive(Serialize)]
struct JsonView<'a> {
    metrics: &'a [MetricInfo],
    view: ViewKind,
    root: JsonNode<'a>,
}

/// One node of the contract, borrowing from the view.
#[derive(Serialize)]
struct JsonNode<'a> {
    kind: &'static str,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    module: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    end_line: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    call_file: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    call_line: Option<u32>,
    incl: Values<'a>,
    excl: Values<'a>,
    children: Children<'a>,
}

impl<'a> JsonNode<'a> {
    fn of(view: &'a ViewTree, id: usize) -> JsonNode<'a> {
        let n = &view.nodes[id];
        JsonNode {
            kind: contract_kind(n.kind),
            name: &n.name,
            module: n.module.as_deref(),
            file: n.file.as_deref(),
            line: n.line,
            end_line: n.end_line,
            call_file: n.call_file.as_deref(),
            call_line: n.call_line,
            incl: Values(&n.incl),
            excl: Values(&n.excl),
            children: Children {
                view,
                ids: &n.children,
            },
        }
    }
}

/// The contract's kinds: `<kernel>` is a procedure, `<partial call paths>` an unknown scope
/// (it has no structure).
fn contract_kind(kind: NodeKind) -> &'static str {
    match kind {
        NodeKind::Root => "root",
        NodeKind::Procedure | NodeKind::Kernel => "procedure",
        NodeKind::Inlined => "inlined",
        NodeKind::Loop => "loop",
        NodeKind::Statement => "statement",
        NodeKind::Module => "module",
        NodeKind::File => "file",
        NodeKind::Partial | NodeKind::Unknown => "unknown",
    }
}

/// Costs as the contract writes them: one value per metric, in event units.
struct Values<'a>(&'a [Cost]);

impl Serialize for Values<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|c| c.value))
    }
}

/// A node's children, serialized as they are reached.
struct Children<'a> {
    view: &'a ViewTree,
    ids: &'a [usize],
}

impl Serialize for Children<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.ids.iter().map(|&id| JsonNode::of(self.view, id)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::ViewNode;

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
