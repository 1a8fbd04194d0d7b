//! The timeline: threads x time, each cell the procedure a thread was in at that time, at a
//! chosen call depth (hpctraceviewer's trace view).
//!
//! A sample's procedure at depth `n` is the `n`-th procedure frame of its calling context
//! counted from the outermost (procedures, inlined code, unknown procedures and `<kernel>`
//! count; loops and lines do not); a shallower context gives its innermost frame, as
//! hpctraceviewer does, and no depth means the innermost frame of every sample. A column
//! covers an equal share of the run's traced time and takes the procedure most of its samples
//! were in; a column without samples continues the thread's last procedure unless the thread
//! went quiet for longer than four of its typical sample intervals (it slept, waited, or ended).

use fxhash::FxHashMap;

use crate::db::database::{Database, Selection};
use crate::db::ids::{DbNodeId, ThreadIdx};

/// What to draw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimelineOptions {
    /// The call depth whose procedure colours a sample (1 = outermost); `None`: the innermost.
    pub depth: Option<usize>,
    /// How many time columns.
    pub columns: usize,
    /// The threads drawn (their lanes; the time span and the procedures are theirs).
    pub threads: Selection,
}

/// The grid, ready to render.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    /// Time of the first traced sample of any thread (the trace clock's ns).
    pub start_ns: u64,
    /// Time of the last traced sample of any thread.
    pub end_ns: u64,
    /// The procedures seen, most samples first: a cell's value indexes this.
    pub procedures: Vec<(String, u64)>,
    /// One lane per traced thread, in database thread order.
    pub lanes: Vec<Lane>,
}

/// One thread's row.
#[derive(Debug, Clone, PartialEq)]
pub struct Lane {
    /// The database thread.
    pub thread: ThreadIdx,
    /// `pid/tid comm`.
    pub label: String,
    /// The process it belongs to (lanes of one process, an MPI rank, are drawn together).
    pub pid: u32,
    /// Every sample as (time ns, index into [`Timeline::procedures`]), in trace order.
    pub samples: Vec<(u64, usize)>,
    /// Per column, the procedure shown (`None`: the thread was not running then).
    pub cells: Vec<Option<usize>>,
}

impl Timeline {
    /// The time one column covers, in ns (at least 1).
    pub fn column_ns(&self) -> f64 {
        let columns = self.lanes.first().map_or(1, |l| l.cells.len().max(1));
        ((self.end_ns - self.start_ns) as f64 / columns as f64).max(1.0)
    }
}

/// The timeline of `db`'s traces, or `None` when it has none.
pub fn timeline(db: &Database, options: &TimelineOptions) -> Option<Timeline> {
    let mut names = ProcedureNames::new(db, options.depth);
    let mut lanes = Vec::new();
    for trace in &db.traces.threads {
        let thread = ThreadIdx::from_index(trace.thread as usize);
        if !options.threads.includes(thread) {
            continue;
        }
        let decoded = trace.decode(db.nodes.len()).ok()?;
        let samples: Vec<(u64, usize)> = decoded
            .into_iter()
            .map(|(time, node)| (time, names.of(DbNodeId::from_index(node as usize))))
            .collect();
        let t = &db.threads[thread.index()];
        let label = format!("{}/{} {}", t.pid, t.tid, t.comm);
        lanes.push(Lane {
            thread,
            label,
            pid: t.pid,
            samples,
            cells: Vec::new(),
        });
    }
    let times = lanes.iter().flat_map(|l| l.samples.iter().map(|s| s.0));
    let start_ns = times.clone().min()?;
    let end_ns = times.max()?;
    let (order, procedures) = names.ranked(&lanes);
    for lane in &mut lanes {
        for s in &mut lane.samples {
            s.1 = order[s.1];
        }
    }
    let mut timeline = Timeline {
        start_ns,
        end_ns,
        procedures,
        lanes,
    };
    let column_ns = ((end_ns - start_ns) as f64 / options.columns.max(1) as f64).max(1.0);
    for lane in &mut timeline.lanes {
        lane.cells = cells(&lane.samples, start_ns, column_ns, options.columns.max(1));
    }
    Some(timeline)
}

/// A lane's columns (see the module documentation).
fn cells(
    samples: &[(u64, usize)],
    start: u64,
    column_ns: f64,
    columns: usize,
) -> Vec<Option<usize>> {
    let hold = 4 * typical_step(samples);
    let mut out = Vec::with_capacity(columns);
    let mut next = 0;
    let mut last: Option<(u64, usize)> = None;
    let mut counts: FxHashMap<usize, u64> = FxHashMap::default();
    for c in 0..columns {
        let end = start as f64 + column_ns * (c + 1) as f64;
        counts.clear();
        let mut first_here = None;
        while next < samples.len() && ((samples[next].0 as f64) < end || c + 1 == columns) {
            *counts.entry(samples[next].1).or_default() += 1;
            first_here.get_or_insert(samples[next].1);
            last = Some(samples[next]);
            next += 1;
        }
        let most = counts
            .iter()
            .max_by_key(|&(p, n)| (*n, std::cmp::Reverse(*p)));
        let cell = match (most, last) {
            (Some((&p, _)), _) => Some(p),
            (None, Some((t, p))) if next < samples.len() && end - (t as f64) <= hold as f64 => {
                Some(p)
            }
            _ => None,
        };
        out.push(cell);
    }
    out
}

/// The median step between a lane's consecutive samples (1 ns when it has fewer than two).
fn typical_step(samples: &[(u64, usize)]) -> u64 {
    let mut steps: Vec<u64> = samples
        .windows(2)
        .map(|w| w[1].0.saturating_sub(w[0].0))
        .collect();
    if steps.is_empty() {
        return 1;
    }
    let mid = steps.len() / 2;
    *steps.select_nth_unstable(mid).1
}

/// Names of the procedures at one depth, memoised per database node.
struct ProcedureNames<'a> {
    db: &'a Database,
    depth: Option<usize>,
    of_node: FxHashMap<DbNodeId, usize>,
    index: FxHashMap<String, usize>,
    names: Vec<String>,
}

impl<'a> ProcedureNames<'a> {
    fn new(db: &'a Database, depth: Option<usize>) -> Self {
        ProcedureNames {
            db,
            depth,
            of_node: FxHashMap::default(),
            index: FxHashMap::default(),
            names: Vec::new(),
        }
    }

    /// The index of the procedure that colours a sample at `node`.
    fn of(&mut self, node: DbNodeId) -> usize {
        if let Some(&i) = self.of_node.get(&node) {
            return i;
        }
        let name = self.db.label(self.frame_of(node));
        let next = self.names.len();
        let i = *self.index.entry(name.clone()).or_insert(next);
        if i == next {
            self.names.push(name);
        }
        self.of_node.insert(node, i);
        i
    }

    /// The procedure frame at the chosen depth on `node`'s path (the root if it has none).
    fn frame_of(&self, node: DbNodeId) -> DbNodeId {
        let mut frames = Vec::new();
        let mut at = node;
        while at != DbNodeId::ROOT {
            let n = &self.db.nodes[at.index()];
            if n.kind.is_frame() {
                frames.push(at);
            }
            at = n.parent;
        }
        frames.reverse();
        let pick = match self.depth {
            Some(d) => frames.get(d.max(1) - 1).or(frames.last()),
            None => frames.last(),
        };
        pick.copied().unwrap_or(DbNodeId::ROOT)
    }

    /// Renumbering of the procedures by samples, most first (ties by name), and the ranked
    /// (name, samples) table.
    fn ranked(&self, lanes: &[Lane]) -> (Vec<usize>, Vec<(String, u64)>) {
        let mut counts = vec![0u64; self.names.len()];
        for s in lanes.iter().flat_map(|l| &l.samples) {
            counts[s.1] += 1;
        }
        let mut by_rank: Vec<usize> = (0..self.names.len()).collect();
        by_rank.sort_by(|&a, &b| {
            counts[b]
                .cmp(&counts[a])
                .then(self.names[a].cmp(&self.names[b]))
        });
        let mut order = vec![0; self.names.len()];
        for (rank, &p) in by_rank.iter().enumerate() {
            order[p] = rank;
        }
        let table = by_rank
            .iter()
            .map(|&p| (self.names[p].clone(), counts[p]))
            .collect();
        (order, table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_take_the_majority_hold_short_gaps_and_blank_long_ones() {
        // One sample a ms: procedure 0 for 10 ms, 1 for 10 ms, then silence 20 ms, then 0.
        let mut samples: Vec<(u64, usize)> =
            (0..20).map(|i| (i * 1_000_000, i as usize / 10)).collect();
        samples.push((40_000_000, 0));
        let cells = cells(&samples, 0, 2_000_000.0, 21);
        assert_eq!(&cells[..5], &[Some(0); 5]);
        assert_eq!(&cells[5..10], &[Some(1); 5]);
        // 19 ms is the last sample of 1: columns up to 23 ms are held (4 steps), then blank.
        assert_eq!(cells[10], Some(1));
        assert_eq!(cells[11], None);
        assert_eq!(&cells[12..20], &[None; 8]);
        assert_eq!(cells[20], Some(0));
    }

    #[test]
    fn the_typical_step_is_the_median() {
        let samples = [(0, 0), (10, 0), (20, 0), (1000, 0)];
        assert_eq!(typical_step(&samples), 10);
        assert_eq!(typical_step(&samples[..1]), 1);
    }
}
