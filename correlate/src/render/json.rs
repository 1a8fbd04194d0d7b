//! The `--json` output: the view tree serialized exactly as DESIGN.md specifies.
//!
//! The shape is defined once, by the serde attributes on [`ViewTree`] and
//! [`ViewNode`](crate::viewtree::ViewNode); this module only writes it. See the README for the
//! contract's field-by-field description.

use std::io::{self, Write};

use crate::viewtree::ViewTree;

/// Write `view` as pretty-printed JSON followed by a newline.
pub fn render(view: &ViewTree, out: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, view)?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::viewtree::{MetricInfo, NodeKind, ViewKind, ViewNode};

    #[test]
    fn output_round_trips_and_has_the_contract_fields() {
        let mut root = ViewNode::new(NodeKind::Root, "<program root>", 1);
        root.incl[0] = 7;
        let mut f = ViewNode::new(NodeKind::Procedure, "f", 1);
        f.incl[0] = 7;
        f.excl[0] = 7;
        f.call_file = Some("a.c".into());
        f.call_line = Some(3);
        root.children.push(f);
        let view = ViewTree {
            metrics: vec![MetricInfo {
                name: "cpu-clock".into(),
                unit: "ns".into(),
                period: None,
                total: 7,
                samples: 1,
            }],
            view: ViewKind::Flat,
            root,
        };
        let mut out = Vec::new();
        render(&view, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["view"], "flat");
        assert_eq!(v["metrics"][0]["period"], serde_json::Value::Null);
        assert_eq!(v["root"]["kind"], "root");
        assert_eq!(v["root"]["children"][0]["call_line"], 3);
        assert_eq!(v["root"]["children"][0]["excl"][0], 7);
        let back: ViewTree = serde_json::from_slice(&out).unwrap();
        assert_eq!(back.root.children[0].name, "f");
    }
}
