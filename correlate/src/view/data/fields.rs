//! One object split by its parts (`--data --fields OBJECT`): by struct member through its type
//! (perf's `typeoff`), by element range for arrays (SIGMA's array element), by byte range when
//! the type is unknown (heap blocks). Each row also says which offsets were actually touched.

use profiler::db::Cost;

use super::views::{metric_infos, pick, selected};
use crate::db::data::{DataObject, DataObjectId, Field, Layout};
use crate::db::database::{Database, Selection};
use crate::view::tree::MetricInfo;

/// Rows an array or an untyped object is split into by default.
pub const DEFAULT_ROWS: u64 = 16;

/// One part of an object.
#[derive(Debug, Clone, PartialEq)]
pub struct PartRow {
    /// `hot`, `cells[].hot`, `A[0..49151]`, `+0x0..+0xfff`, `<outside the type>`.
    pub name: String,
    /// First byte of the part in the object.
    pub offset: i64,
    /// Bytes in the part.
    pub size: u64,
    /// The lowest and highest offset sampled in the part.
    pub touched: Option<(i64, i64)>,
    /// Elements, for array parts: the lowest and highest element index sampled.
    pub elements: Option<(u64, u64)>,
    /// Cost per metric.
    pub costs: Vec<Cost>,
}

/// The `--fields` view of one object.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldTable {
    /// The object.
    pub object: DataObjectId,
    /// How it was split: `fields`, `elements` or `bytes`.
    pub split: &'static str,
    /// Metrics; totals are the object's cost.
    pub metrics: Vec<MetricInfo>,
    /// The parts, in offset order (every member of a struct, sampled or not).
    pub rows: Vec<PartRow>,
}

/// How one offset maps to a row.
enum Splitter<'a> {
    Fields(&'a [Field]),
    Elements {
        name: &'a str,
        size: u64,
        per_row: u64,
        fields: &'a [Field],
    },
    Bytes(u64),
}

/// The objects whose name is `name`, or contains it when none is named exactly so.
pub fn find_objects<'d>(db: &'d Database, name: &str) -> Vec<(DataObjectId, &'d DataObject)> {
    let all = || {
        db.data
            .objects
            .iter()
            .enumerate()
            .map(|(i, o)| (DataObjectId::from_index(i), o))
    };
    let exact: Vec<_> = all().filter(|(_, o)| o.name == name).collect();
    if exact.is_empty() {
        all().filter(|(_, o)| o.name.contains(name)).collect()
    } else {
        exact
    }
}

/// Split `object`'s costs in the selection by its parts; arrays and untyped objects into
/// `rows` ranges (at least one element or 64 bytes each), or ranges of `span` bytes if given.
pub fn fields(
    db: &Database,
    selection: &Selection,
    object: DataObjectId,
    rows: u64,
    span: Option<u64>,
) -> FieldTable {
    let o = db.data.object(object);
    let size = o.size.unwrap_or(0);
    let splitter = match &o.layout {
        Some(Layout::Fields(fields)) => Splitter::Fields(fields),
        Some(Layout::Elements {
            size: elem,
            fields,
            count,
        }) if *elem > 0 => {
            let count = if *count > 0 { *count } else { size / elem };
            let per_row = match span {
                Some(bytes) => (bytes / elem).max(1),
                None => count.div_ceil(rows.max(1)).max(1),
            };
            Splitter::Elements {
                name: &o.name,
                size: *elem,
                per_row: if fields.is_empty() { per_row } else { u64::MAX },
                fields,
            }
        }
        _ => Splitter::Bytes(span.unwrap_or_else(|| (size.div_ceil(rows.max(1))).max(64))),
    };
    let mut table = FieldTable {
        object,
        split: match splitter {
            Splitter::Fields(_) => "fields",
            Splitter::Elements { .. } => "elements",
            Splitter::Bytes(_) => "bytes",
        },
        metrics: Vec::new(),
        rows: splitter.declared_rows(db.metrics.len()),
    };
    let mut total = vec![Cost::default(); db.metrics.len()];
    for a in selected(db, selection).filter(|a| a.object == object) {
        Cost::add_each(&mut total, &a.costs);
        let row = match a.offset {
            Some(off) => splitter.row(&mut table.rows, off, db.metrics.len()),
            None => outside(&mut table.rows, "<offset unknown>", db.metrics.len()),
        };
        let r = &mut table.rows[row];
        Cost::add_each(&mut r.costs, &a.costs);
        if let Some(off) = a.offset {
            r.touched = Some(
                r.touched
                    .map_or((off, off), |(lo, hi)| (lo.min(off), hi.max(off))),
            );
            if let Splitter::Elements { size, .. } = splitter {
                let e = off.max(0) as u64 / size;
                r.elements = Some(r.elements.map_or((e, e), |(lo, hi)| (lo.min(e), hi.max(e))));
            }
        }
    }
    table.metrics = metric_infos(db, &total);
    table.rows.sort_by_key(|r| r.offset);
    table
}

impl FieldTable {
    /// Keep only the metrics at `indices`, in that order.
    pub fn select_metrics(&mut self, indices: &[usize]) {
        self.metrics = pick(&self.metrics, indices);
        for r in &mut self.rows {
            r.costs = pick(&r.costs, indices);
        }
    }
}

impl Splitter<'_> {
    /// The rows known before any sample: every member of a struct.
    fn declared_rows(&self, metrics: usize) -> Vec<PartRow> {
        let members = match self {
            Splitter::Fields(fields) => fields.iter().map(|f| (f.name.clone(), f)).collect(),
            Splitter::Elements { name, fields, .. } => fields
                .iter()
                .map(|f| (format!("{name}[].{}", f.name), f))
                .collect(),
            Splitter::Bytes(_) => Vec::new(),
        };
        members
            .into_iter()
            .map(|(name, f)| part(name, f.offset as i64, f.size, metrics))
            .collect()
    }

    /// The row for offset `off`, added if new.
    fn row(&self, rows: &mut Vec<PartRow>, off: i64, metrics: usize) -> usize {
        let (name, start, size) = match *self {
            Splitter::Fields(fields) => match member(fields, off) {
                Some(f) => return position_of(rows, &f.name, off, f.size, metrics),
                None => return outside(rows, "<outside the members>", metrics),
            },
            Splitter::Elements {
                name,
                size,
                per_row,
                fields,
            } if off >= 0 => {
                let within = off as u64 % size;
                if per_row == u64::MAX {
                    return match member(fields, within as i64) {
                        Some(f) => {
                            let n = format!("{name}[].{}", f.name);
                            position_of(rows, &n, f.offset as i64, f.size, metrics)
                        }
                        None => outside(rows, "<outside the members>", metrics),
                    };
                }
                let first = off as u64 / size / per_row * per_row;
                let last = first + per_row - 1;
                (
                    format!("{name}[{first}..{last}]"),
                    first * size,
                    per_row * size,
                )
            }
            Splitter::Bytes(span) if off >= 0 => {
                let start = off as u64 / span * span;
                (
                    format!("+{start:#x}..+{:#x}", start + span - 1),
                    start,
                    span,
                )
            }
            _ => return outside(rows, "<before the start>", metrics),
        };
        position_of(rows, &name, start as i64, size, metrics)
    }
}

/// The member of `fields` holding offset `off`.
pub(crate) fn member(fields: &[Field], off: i64) -> Option<&Field> {
    let off = u64::try_from(off).ok()?;
    fields
        .iter()
        .filter(|f| f.offset <= off && off < f.offset + f.size.max(1))
        .min_by_key(|f| f.size)
}

/// The row named `name`, added at `offset` if new.
fn position_of(
    rows: &mut Vec<PartRow>,
    name: &str,
    offset: i64,
    size: u64,
    metrics: usize,
) -> usize {
    match rows.iter().position(|r| r.name == name) {
        Some(i) => i,
        None => {
            rows.push(part(name.to_string(), offset, size, metrics));
            rows.len() - 1
        }
    }
}

/// The row for offsets no part holds.
fn outside(rows: &mut Vec<PartRow>, name: &str, metrics: usize) -> usize {
    position_of(rows, name, i64::MAX, 0, metrics)
}

fn part(name: String, offset: i64, size: u64, metrics: usize) -> PartRow {
    PartRow {
        name,
        offset,
        size,
        touched: None,
        elements: None,
        costs: vec![Cost::default(); metrics],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(name: &str, offset: u64, size: u64) -> Field {
        Field {
            name: name.into(),
            offset,
            size,
        }
    }

    fn name(splitter: &Splitter<'_>, rows: &mut Vec<PartRow>, off: i64) -> String {
        let r = splitter.row(rows, off, 1);
        rows[r].name.clone()
    }

    #[test]
    fn offsets_map_to_members_elements_and_byte_ranges() {
        let fields = [field("hot", 0, 8), field("cold", 8, 56)];
        let mut rows = Vec::new();
        let by_member = Splitter::Fields(&fields);
        assert_eq!(name(&by_member, &mut rows, 12), "cold");
        assert_eq!(name(&by_member, &mut rows, 64), "<outside the members>");
        let cells = Splitter::Elements {
            name: "cells",
            size: 64,
            per_row: u64::MAX,
            fields: &fields,
        };
        assert_eq!(name(&cells, &mut rows, 64 * 9 + 3), "cells[].hot");
        let array = Splitter::Elements {
            name: "A",
            size: 1,
            per_row: 4096,
            fields: &[],
        };
        let r = array.row(&mut rows, 2 * 4096 + 0x123, 1);
        assert_eq!(
            (rows[r].name.as_str(), rows[r].offset),
            ("A[8192..12287]", 8192)
        );
        let bytes = Splitter::Bytes(64);
        assert_eq!(name(&bytes, &mut rows, 130), "+0x80..+0xbf");
        assert_eq!(name(&bytes, &mut rows, -16), "<before the start>");
    }
}
