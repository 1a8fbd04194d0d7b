//! Sets of link-time address ranges: normalized (sorted, disjoint, coalesced) and tested for
//! overlap. Scopes, focused analysis and coverage all describe code as such sets.

use std::ops::Range;

/// Sort `ranges`, drop empty ones and coalesce overlapping or adjacent ones.
pub fn normalize_ranges(mut ranges: Vec<Range<u64>>) -> Vec<Range<u64>> {
    merge_in_place(&mut ranges);
    ranges
}

/// [`normalize_ranges`] in place: `ranges` becomes its sorted, disjoint union.
pub(crate) fn merge_in_place(ranges: &mut Vec<Range<u64>>) {
    ranges.retain(|r| r.start < r.end);
    // Unstable is enough: ranges starting together merge into one whatever their order.
    ranges.sort_unstable_by_key(|r| r.start);
    let mut kept: usize = 0;
    for i in 0..ranges.len() {
        let r = ranges[i].clone();
        match kept.checked_sub(1).map(|k| &mut ranges[k]) {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => {
                ranges[kept] = r;
                kept += 1;
            }
        }
    }
    ranges.truncate(kept);
}

/// Whether any of `ranges` overlaps `region` (sorted and disjoint, as [`normalize_ranges`]
/// makes it). O(k log n) for k ranges and n region pieces.
pub(crate) fn ranges_meet(region: &[Range<u64>], ranges: &[Range<u64>]) -> bool {
    ranges.iter().any(|r| {
        let i = region.partition_point(|g| g.end <= r.start);
        region
            .get(i)
            .is_some_and(|g| g.start < r.end && r.start < r.end)
    })
}

/// The parts of `r` between `covering`: ranges sorted by start (they may overlap one another),
/// none starting at or past `r.end`.
pub(crate) fn gaps<T: Copy + Ord>(
    r: Range<T>,
    covering: impl Iterator<Item = Range<T>>,
) -> Vec<Range<T>> {
    let mut out = Vec::new();
    let mut cursor = r.start;
    for c in covering {
        if c.end <= cursor {
            continue;
        }
        if c.start > cursor {
            out.push(cursor..c.start);
        }
        cursor = cursor.max(c.end);
    }
    if cursor < r.end {
        out.push(cursor..r.end);
    }
    out
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    #[test]
    fn ranges_meet_only_on_overlap() {
        let region = [0x10..0x20, 0x40..0x50];
        assert!(ranges_meet(&region, &[0x1f..0x30]));
        assert!(ranges_meet(&region, &[0x00..0x08, 0x48..0x49]));
        assert!(
            !ranges_meet(&region, &[0x20..0x40]),
            "touching is not meeting"
        );
        assert!(!ranges_meet(&region, &[0x50..0x60, 0x15..0x15]));
    }

    #[test]
    fn normalize_coalesces() {
        assert_eq!(
            normalize_ranges(vec![5..7, 1..3, 3..4, 6..9, 10..10]),
            vec![1..4, 5..9]
        );
        // Ranges starting together merge to the longest, whichever comes first.
        for input in [vec![2..3, 2..8, 9..9, 2..5], vec![2..8, 2..3, 2..5]] {
            assert_eq!(normalize_ranges(input), vec![2..8]);
        }
        // An empty range and a reversed one (end before start) are dropped.
        let reversed = Range { start: 7, end: 2 };
        assert_eq!(normalize_ranges(vec![4..4, reversed]), vec![]);
    }
}
