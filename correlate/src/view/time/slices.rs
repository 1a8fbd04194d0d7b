//! Time slices (tQUAD's view): the traced time cut into equal slices, and per procedure (at a
//! chosen call depth, as in the timeline) its samples in each slice, its activity span (the
//! slices it has samples in) and the run's phases: maximal runs of consecutive slices with the
//! same dominant procedures (those with at least a quarter of the slice's samples, all threads
//! together, so that threads working side by side make one phase, not a flicker between them).

use crate::db::database::{Database, Selection};
use crate::view::time::{round_step, timeline, TimelineOptions};

/// Per procedure per slice samples, activity spans and phases.
#[derive(Debug, Clone, PartialEq)]
pub struct Slices {
    /// Start of slice 0 (the first traced sample), trace clock ns.
    pub start_ns: u64,
    /// Length of a slice, ns.
    pub slice_ns: u64,
    /// One row per procedure, most samples first.
    pub rows: Vec<SliceRow>,
    /// The phases, in time order.
    pub phases: Vec<Phase>,
}

/// One procedure's samples over time.
#[derive(Debug, Clone, PartialEq)]
pub struct SliceRow {
    /// The procedure.
    pub name: String,
    /// Samples in each slice.
    pub per_slice: Vec<u64>,
}

impl SliceRow {
    /// All its samples.
    pub fn total(&self) -> u64 {
        self.per_slice.iter().sum()
    }

    /// How many slices it has samples in.
    pub fn active(&self) -> usize {
        self.per_slice.iter().filter(|&&n| n > 0).count()
    }

    /// Its first and last slice with samples (`None` without samples).
    pub fn span(&self) -> Option<(usize, usize)> {
        let first = self.per_slice.iter().position(|&n| n > 0)?;
        let last = self.per_slice.iter().rposition(|&n| n > 0)?;
        Some((first, last))
    }
}

/// The share of a slice's samples that makes a procedure one of its dominant ones.
const DOMINANT_SHARE: f64 = 0.25;

/// Consecutive slices with the same dominant procedures.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    /// First slice.
    pub first: usize,
    /// Last slice (inclusive).
    pub last: usize,
    /// Indices into [`Slices::rows`] of the dominant procedures, most samples overall first
    /// (empty: no samples at all).
    pub procedures: Vec<usize>,
    /// Their samples in these slices.
    pub samples: u64,
    /// All samples in these slices.
    pub all: u64,
}

/// The slices of the traces of `db`'s threads in `threads`, `slice_ns` long (default: a round
/// length giving at most 11 slices), procedures at `depth` (innermost if `None`); `None` when
/// they have no traces.
pub fn slices(
    db: &Database,
    threads: &Selection,
    depth: Option<usize>,
    slice_ns: Option<u64>,
) -> Option<Slices> {
    let columns = 1;
    let threads = threads.clone();
    let t = timeline(
        db,
        &TimelineOptions {
            depth,
            columns,
            threads,
        },
    )?;
    let slice_ns = slice_ns
        .unwrap_or_else(|| round_step(t.end_ns - t.start_ns))
        .max(1);
    let count = ((t.end_ns - t.start_ns) / slice_ns + 1) as usize;
    let mut rows: Vec<SliceRow> = t
        .procedures
        .iter()
        .map(|(name, _)| SliceRow {
            name: name.clone(),
            per_slice: vec![0; count],
        })
        .collect();
    for &(time, p) in t.lanes.iter().flat_map(|l| &l.samples) {
        rows[p].per_slice[((time - t.start_ns) / slice_ns) as usize] += 1;
    }
    let phases = phases(&rows, count);
    Some(Slices {
        start_ns: t.start_ns,
        slice_ns,
        rows,
        phases,
    })
}

/// The phases of `rows` over `count` slices (see the module documentation).
fn phases(rows: &[SliceRow], count: usize) -> Vec<Phase> {
    let mut out: Vec<Phase> = Vec::new();
    for s in 0..count {
        let all: u64 = rows.iter().map(|r| r.per_slice[s]).sum();
        let dominant: Vec<usize> = (0..rows.len())
            .filter(|&r| {
                let n = rows[r].per_slice[s];
                n > 0 && n as f64 >= DOMINANT_SHARE * all as f64
            })
            .collect();
        match out.last_mut() {
            Some(p) if p.procedures == dominant => {
                p.last = s;
                p.all += all;
            }
            _ => out.push(Phase {
                first: s,
                last: s,
                procedures: dominant,
                samples: 0,
                all,
            }),
        }
    }
    for p in &mut out {
        let slices = p.first..=p.last;
        p.samples = p
            .procedures
            .iter()
            .map(|&r| rows[r].per_slice[slices.clone()].iter().sum::<u64>())
            .sum();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, per_slice: &[u64]) -> SliceRow {
        SliceRow {
            name: name.into(),
            per_slice: per_slice.to_vec(),
        }
    }

    #[test]
    fn phases_are_runs_of_the_same_dominant_procedures_and_spans_their_slices() {
        let rows = [
            row("a", &[9, 8, 1, 0, 0, 5, 4]),
            row("b", &[1, 0, 7, 0, 5, 1, 4]),
        ];
        let p = phases(&rows, 7);
        let runs: Vec<(usize, usize, &[usize], u64, u64)> = p
            .iter()
            .map(|p| (p.first, p.last, &p.procedures[..], p.samples, p.all))
            .collect();
        assert_eq!(
            runs,
            [
                (0, 1, &[0][..], 17, 18),
                (2, 2, &[1], 7, 8),
                (3, 3, &[], 0, 0),
                (4, 4, &[1], 5, 5),
                (5, 5, &[0], 5, 6),
                (6, 6, &[0, 1], 8, 8),
            ]
        );
        assert_eq!(
            (rows[1].span(), rows[1].active(), rows[1].total()),
            (Some((0, 6)), 5, 18)
        );
    }
}
