//! Unit tests of the statistics, and of the computation against the definition: each group's
//! own view, projected for its threads.

use super::*;
use crate::db::database::{MetricDesc, ThreadDesc};
use crate::db::ids::DbNodeId;
use crate::db::node::{ChildIndex, NodeKey};
use profiler::db::{Cost, Sampling};
use profiler::job::JobPlace;

/// main > work, four ranks of one thread each: rank r spends 10 in main itself and
/// 100 * (r + 1) in work.
fn four_ranks() -> Database {
    let mut db = Database::new(vec![MetricDesc::new(
        "cpu-clock",
        "ns",
        Sampling::Period(1),
    )]);
    let mut index = ChildIndex::default();
    let main = db.child(
        &mut index,
        DbNodeId::ROOT,
        NodeKey::pseudo(NodeKind::Procedure, "main"),
    );
    let work = db.child(
        &mut index,
        main,
        NodeKey::pseudo(NodeKind::Procedure, "work"),
    );
    for r in 0..4u32 {
        db.profiles.push(format!("app-{r}.db"));
        db.jobs.push(JobPlace {
            rank: Some(3 - r),
            job: None,
        });
        db.threads.push(ThreadDesc {
            profile: r,
            pid: 100 + r,
            tid: 100 + r,
            comm: "app".into(),
        });
        let t = ThreadIdx::from_index(r as usize);
        db.add_cost(
            main,
            t,
            &[Cost {
                samples: 1,
                value: 10,
            }],
        );
        let value = 100 * (r as u64 + 1);
        db.add_cost(work, t, &[Cost { samples: 1, value }]);
    }
    db
}

#[test]
fn ranks_give_exact_statistics_and_the_slowest_rank() {
    let table = scope_stats(&four_ranks(), ViewKind::TopDown, 0, Over::Ranks);
    let names: Vec<&str> = table.groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["rank 3", "rank 2", "rank 1", "rank 0"]);
    let work = table.rows.iter().find(|r| r.scope == "work").unwrap();
    assert_eq!((work.sum, work.min, work.max), (1000, 100, 400));
    assert_eq!((work.mean, work.min_at, work.max_at), (250.0, 0, 3));
    // Values 100, 200, 300, 400: population variance 12,500.
    assert!((work.stddev - 12_500f64.sqrt()).abs() < 1e-9);
    assert!((work.cv - 12_500f64.sqrt() / 250.0).abs() < 1e-12);
    assert_eq!(work.imbalance, 150.0);
    assert_eq!(work.context, "main");
    assert_eq!(table.groups[work.max_at].rank, Some(0));
    // main holds work: same imbalance, larger sum, so it sorts first; the root is last
    // among equals only by sum (it is larger): root, main, work.
    let order: Vec<&str> = table.rows.iter().map(|r| r.scope.as_str()).collect();
    assert_eq!(order, ["<program root>", "main", "work"]);
}

#[test]
fn zeros_folded_in_at_once_give_the_statistics_of_the_full_list() {
    // Groups 0, 1, 4 and 6 miss the scope: zeros before, between and after the values.
    let values = [0u64, 0, 7, 3, 0, 9, 0];
    let mut r = Running::default();
    for (g, &v) in values.iter().enumerate().filter(|(_, v)| **v > 0) {
        r.add(v, g);
    }
    r.zeros_until(values.len());
    let n = values.len() as f64;
    let mean = values.iter().sum::<u64>() as f64 / n;
    let var = values
        .iter()
        .map(|&v| (v as f64 - mean).powi(2))
        .sum::<f64>()
        / n;
    assert_eq!((r.n, r.sum, r.min, r.max), (7, 19, (0, 0), (9, 5)));
    assert!((r.mean - mean).abs() < 1e-12);
    assert!((r.m2 / n - var).abs() < 1e-12);
}

#[test]
fn a_group_that_never_reached_a_scope_counts_as_zero() {
    let mut db = four_ranks();
    let extra = ThreadIdx::from_index(db.threads.len());
    db.threads.push(ThreadDesc {
        profile: 0,
        pid: 100,
        tid: 999,
        comm: "helper".into(),
    });
    db.add_cost(
        DbNodeId::from_index(1),
        extra,
        &[Cost {
            samples: 1,
            value: 5,
        }],
    );
    let table = scope_stats(&db, ViewKind::TopDown, 0, Over::Threads);
    assert_eq!(table.groups.len(), 5);
    assert_eq!(table.groups[4].name, "thread 999 (rank 3)");
    let work = table.rows.iter().find(|r| r.scope == "work").unwrap();
    assert_eq!((work.min, work.min_at, work.mean), (0, 4, 200.0));
    let by_rank = scope_stats(&db, ViewKind::TopDown, 0, Over::Ranks);
    let main = by_rank.rows.iter().find(|r| r.scope == "main").unwrap();
    assert_eq!((main.min, main.max), (110 + 5, 410));
}

/// The statistics by their definition: each group's view projected for its threads, its
/// scopes' values summed and folded in group by group.
fn reference(db: &Database, kind: ViewKind, metric: usize, over: Over) -> StatsTable {
    let (groups, members) = groups(db, over);
    let mut scopes = Scopes::default();
    let mut values: FxHashMap<usize, u64> = FxHashMap::default();
    for (g, threads) in members.iter().enumerate() {
        let view = ViewTree::from_database(db, kind, &Selection::Threads(threads.clone()));
        let mut stack = vec![(0usize, usize::MAX)];
        while let Some((id, parent)) = stack.pop() {
            let node = &view.nodes[id];
            let at = scopes.get(parent, node);
            let value = values.entry(at).or_default();
            *value = value.saturating_add(node.incl[metric].value);
            stack.extend(view.children(id).map(|(child, _)| (child, at)));
        }
        for (at, value) in values.drain() {
            scopes.list[at].running.add(value, g);
        }
    }
    for s in &mut scopes.list {
        s.running.zeros_until(groups.len());
    }
    StatsTable {
        view: kind,
        over,
        metric: db.metrics[metric].name.clone(),
        unit: db.metrics[metric].unit.clone(),
        groups,
        rows: rows(scopes.list),
    }
}

/// Three ranks of two threads each, two metrics, over main with a loop calling f, which calls
/// itself and then g, and a call of g from main; costs differ by rank, thread and node, and
/// one is large enough to saturate the sums.
fn job() -> Database {
    let metrics = vec![
        MetricDesc::new("cpu-clock", "ns", Sampling::Period(1)),
        MetricDesc::new("cycles", "events", Sampling::Period(1)),
    ];
    let mut db = Database::new(metrics);
    let mut index = ChildIndex::default();
    let mut child = |db: &mut Database, parent, kind, name: &str, line| {
        let key = NodeKey {
            line: Some(line),
            ..NodeKey::pseudo(kind, name)
        };
        db.child(&mut index, parent, key)
    };
    use NodeKind::{Loop, Procedure, Statement};
    let main = child(&mut db, DbNodeId::ROOT, Procedure, "main", 1);
    let lp = child(&mut db, main, Loop, "", 5);
    let s6 = child(&mut db, lp, Statement, "", 6);
    let f = child(&mut db, s6, Procedure, "f", 20);
    let s21 = child(&mut db, f, Statement, "", 21);
    let f_again = child(&mut db, s21, Procedure, "f", 20);
    let s22 = child(&mut db, f_again, Statement, "", 22);
    let g = child(&mut db, s22, Procedure, "g", 30);
    let s9 = child(&mut db, main, Statement, "", 9);
    let g_from_main = child(&mut db, s9, Procedure, "g", 30);
    let leaves = [main, s6, s21, s22, g, g_from_main, s9];
    for r in 0..3u32 {
        db.profiles.push(format!("app-{r}.db"));
        db.jobs.push(JobPlace {
            rank: Some(r),
            job: None,
        });
        for t in 0..2u32 {
            let thread = ThreadIdx::from_index(db.threads.len());
            db.threads.push(ThreadDesc {
                profile: r,
                pid: 100 + r,
                tid: 100 + r + 10 * t,
                comm: "app".into(),
            });
            for (i, &leaf) in leaves.iter().enumerate() {
                let v = u64::from((r * 7 + t * 3) % 4) + i as u64 % 3;
                let huge = if (r, t, i) == (2, 1, 4) {
                    u64::MAX / 2
                } else {
                    0
                };
                let costs = [
                    Cost {
                        samples: v,
                        value: 10 * v + huge,
                    },
                    Cost {
                        samples: 1,
                        value: v * u64::from(r + 1),
                    },
                ];
                if v > 0 {
                    db.add_cost(leaf, thread, &costs);
                }
            }
        }
    }
    db
}

#[test]
fn the_statistics_are_those_of_each_group_s_own_view() {
    let db = job();
    let sorted = |mut t: StatsTable| {
        t.rows
            .sort_by(|a, b| (&a.context, &a.scope, a.sum).cmp(&(&b.context, &b.scope, b.sum)));
        t
    };
    for kind in [ViewKind::TopDown, ViewKind::Callers, ViewKind::Flat] {
        for over in [Over::Ranks, Over::Threads] {
            for metric in 0..2 {
                let fast = scope_stats(&db, kind, metric, over);
                assert!(fast.rows.len() >= 4, "{kind:?} {over:?}");
                let expected = reference(&db, kind, metric, over);
                assert_eq!(sorted(fast), sorted(expected), "{kind:?} {over:?} {metric}");
            }
        }
    }
}
