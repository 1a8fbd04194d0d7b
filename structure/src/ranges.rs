//! Sets of link-time address ranges: normalized (sorted, disjoint, coalesced) and tested for
//! overlap. Scopes, focused analysis and coverage all describe code as such sets.

use std::ops::Range;

/// Sort `ranges`, drop empty ones and coalesce overlapping or adjacent ones.
pub fn normalize_ranges(mut ranges: Vec<Range<u64>>) -> Vec<Range<u64>> {
    ranges.retain(|r| r.start < r.end);
    ranges.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
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
    }
}
