//! Wall time: where a profile measured both a clock (time on the CPU) and `off-cpu` (time off
//! it, waiting), their sum per context, as its own metric (`wall`), so that every view, the
//! HTML report and every export show it beside the two: what a thread's time went to, running
//! or waiting.

use profiler::db::Cost;

use crate::db::database::{Database, MetricDesc, WALL_METRIC};

/// The CPU-time metrics a wall time adds to `off-cpu`, the first found.
const CLOCKS: [&str; 2] = ["cpu-clock", "task-clock"];

/// Add the `wall` metric to `db` where it has `off-cpu` and a clock: per node, thread and data
/// access, the clock's cost plus the off-CPU cost (samples and nanoseconds). Returns the
/// clock's name, or `None` (and `db` unchanged) where there is nothing to add.
pub(crate) fn add_wall(db: &mut Database) -> Option<&'static str> {
    let index = |name: &str| db.metrics.iter().position(|m| m.name == name);
    if index(WALL_METRIC).is_some() {
        return None;
    }
    let off = index("off-cpu")?;
    let (clock, name) = CLOCKS.iter().find_map(|&c| Some((index(c)?, c)))?;
    let sampling = db.metrics[clock].sampling;
    let wall = db.add_metric(MetricDesc::new(WALL_METRIC, "ns", sampling));
    let sum = |costs: &mut [Cost]| {
        costs[wall] = Cost {
            samples: costs[clock].samples + costs[off].samples,
            value: costs[clock].value + costs[off].value,
        }
    };
    for node in &mut db.nodes {
        for (thread, mut costs) in node.costs.take() {
            sum(&mut costs);
            node.costs.add(thread, &costs);
        }
    }
    for access in &mut db.data.accesses {
        sum(&mut access.costs);
    }
    db.compute_totals();
    Some(name)
}
