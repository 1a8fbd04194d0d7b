//! Tests of the enrichment: contexts expanded into static scopes, views over the tree,
//! addresses without structure.

use super::*;
use crate::db::database::{Selection, StructureSource};
use crate::view::projection::{callers, top_down};
use profiler::builder::{code, ProfileBuilder};
use profiler::db::{AddrKind, EventDesc, Sampling};
use structure::Scope;

/// main [0x100, 0x140): loop at line 10 holding an inlined `add` (called from line 11)
/// whose statements are [0x100, 0x110) line 30 and [0x110, 0x120) line 31 (a call to `g`),
/// then line 12 at [0x120, 0x140) (a call to `g`). g [0x200, 0x210): line 40.
pub(crate) fn tree() -> ScopeTree {
    let mut t = ScopeTree::new("/bin/app");
    let f = t.intern_file("/src/app.cc");
    let scope = |kind, name: &str, line, ranges: Vec<std::ops::Range<u64>>| {
        let mut s = Scope::new(kind);
        s.name = name.into();
        s.file = Some(f);
        s.line = line;
        s.ranges = ranges;
        s
    };
    let main = t.add(t.root(), scope(ScopeKind::Procedure, "main", 5, vec![]));
    let lp = t.add(main, scope(ScopeKind::Loop, "", 10, vec![]));
    let alien = ScopeKind::Alien {
        call_file: Some(f),
        call_line: 11,
    };
    let add = t.add(lp, scope(alien, "add", 29, vec![]));
    t.add(add, scope(ScopeKind::Statement, "", 30, vec![0x100..0x110]));
    t.add(add, scope(ScopeKind::Statement, "", 31, vec![0x110..0x120]));
    t.add(
        main,
        scope(ScopeKind::Statement, "", 12, vec![0x120..0x140]),
    );
    let g = t.add(t.root(), scope(ScopeKind::Procedure, "g", 39, vec![]));
    t.add(g, scope(ScopeKind::Statement, "", 40, vec![0x200..0x210]));
    t.finish();
    t
}

/// Two samples in the inlined loop body, g called twice from the inlined call at line 31
/// (return address 0x120: exactly the end of line 31's range) and once from line 12.
pub(crate) fn profile() -> Profile {
    let event = EventDesc::new("cpu-clock", Sampling::Frequency(1000), "ns");
    let (ip, ret) = (AddrKind::Ip, AddrKind::Return);
    ProfileBuilder::new("app", event)
        .module("/bin/app")
        .thread(1, 1, "app")
        .path(&[code(0, 0x104, ip)], 2, 1000)
        .path(&[code(0, 0x120, ret), code(0, 0x204, ip)], 2, 1000)
        .path(&[code(0, 0x130, ret), code(0, 0x208, ip)], 1, 1000)
        .build()
}

fn enrich() -> Database {
    let t = tree();
    let trees = [Some(&t)];
    let p = profile();
    let metrics = vec![MetricDesc::new(
        "cpu-clock",
        "ns",
        Sampling::Frequency(1000),
    )];
    let modules = vec![ModuleDesc {
        path: "/bin/app".into(),
        build_id: None,
        structure: StructureSource::OnTheFly,
    }];
    let mut e = Enricher::new(metrics, modules, &trees, Vec::new());
    let map = ProfileMapping {
        profile: 0,
        modules: vec![DbModuleId(0)],
        metrics: vec![0],
    };
    e.add_profile(&p, &map);
    finished(e)
}

/// The finished database of `e`.
pub(crate) fn finished(e: Enricher<'_>) -> Database {
    let (mut db, unknown, _, _) = e.into_parts();
    finish_tree(&mut db, &unknown);
    db
}

fn path_labels(db: &Database, mut id: DbNodeId) -> Vec<String> {
    let mut out = Vec::new();
    while id != DbNodeId::ROOT {
        out.push(db.label(id));
        id = db.nodes[id.index()].parent;
    }
    out.reverse();
    out
}

#[test]
fn contexts_expand_into_static_scopes_and_merge() {
    let db = enrich();
    assert_eq!(
        db.metrics[0].total,
        Cost {
            samples: 5,
            value: 5000
        }
    );
    let leaves: Vec<Vec<String>> = (0..db.nodes.len())
        .filter(|&i| !db.nodes[i].costs.is_empty())
        .map(|i| path_labels(&db, DbNodeId::from_index(i)))
        .collect();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        leaves,
        vec![
            s(&["main", "loop at app.cc: 10", "[I] add", "app.cc: 30"]),
            s(&[
                "main",
                "loop at app.cc: 10",
                "[I] add",
                "app.cc: 31",
                "g",
                "app.cc: 40"
            ]),
            s(&["main", "app.cc: 12", "g", "app.cc: 40"]),
        ],
        "ra - 1 keeps 0x120 in line 31; the loop and main are shared"
    );
    let inlined = db
        .nodes
        .iter()
        .find(|n| n.kind == NodeKind::Inlined)
        .unwrap();
    assert_eq!(inlined.call_line, Some(11));
    let g = db.nodes.iter().find(|n| n.name == "g").unwrap();
    assert_eq!(
        g.call_line,
        Some(31),
        "a procedure's call site is the caller's line"
    );
}

#[test]
fn views_over_enriched_tree() {
    let db = enrich();
    let t = top_down(&db, &Selection::All);
    let main = t.find(|n| n.name == "main").unwrap();
    assert_eq!(
        t.nodes[main].excl[0].samples, 2,
        "inlined code is main's own"
    );
    let add = t.find(|n| n.label() == "[I] add").unwrap();
    assert_eq!(
        (t.nodes[add].incl[0].samples, t.nodes[add].excl[0].samples),
        (4, 2)
    );
    let c = callers(&db, &Selection::All);
    let g = c.children(0).find(|(_, n)| n.name == "g").unwrap().0;
    let split: Vec<(String, u64)> = c
        .children(g)
        .map(|(_, n)| (n.label(), n.incl[0].samples))
        .collect();
    assert_eq!(
        split,
        vec![("[I] add".to_string(), 2), ("main".to_string(), 1)]
    );
}

#[test]
fn addresses_without_structure_are_unknown_procedures() {
    let p = profile();
    let trees = [None];
    let modules = vec![ModuleDesc {
        path: "/bin/app".into(),
        build_id: None,
        structure: StructureSource::None("test".into()),
    }];
    let metrics = vec![MetricDesc::new(
        "cpu-clock",
        "ns",
        Sampling::Frequency(1000),
    )];
    let mut e = Enricher::new(metrics, modules, &trees, Vec::new());
    e.add_profile(
        &p,
        &ProfileMapping {
            profile: 0,
            modules: vec![DbModuleId(0)],
            metrics: vec![0],
        },
    );
    let db = finished(e);
    assert_eq!(db.stats.unknown_addresses, 5);
    assert_eq!(db.stats.unknown_samples, 5);
    assert!(db
        .nodes
        .iter()
        .any(|n| n.name == "<unknown procedure> 0x11f [app]"));
    assert_eq!(db.metrics[0].total.samples, 5, "nothing dropped");
}
