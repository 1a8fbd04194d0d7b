//! The metric values of a database: propagated from the point values per thread (exclusive
//! "function" scope, inclusive "execution" scope), summed over threads for the summary profile,
//! and laid out as `profile.db` (by thread) and `cct.db` (by context).

use super::bytes::Out;
use super::meta::{ID_KINDS, SCOPES};
use super::{Experiment, PointValue, Relation};

/// The values of one profile: (ctxId, [(metric id, value)]) sorted by both, no zeros.
type Plane = Vec<(u32, Vec<(u16, f64)>)>;

/// Every profile's plane: the summary first, then one per thread.
pub(crate) fn planes(ex: &Experiment) -> Vec<Plane> {
    let width = ex.metrics.len() * SCOPES.len();
    let mut summary = vec![0.0; (ex.contexts.len() + 1) * width];
    let mut planes = vec![Plane::new()];
    let mut by_thread = vec![Vec::new(); ex.threads.len()];
    for p in &ex.values {
        by_thread[p.thread].push(p);
    }
    // One thread's dense values at a time: memory stays at two planes whatever the threads.
    for values in &by_thread {
        let dense = propagate(ex, values, width);
        for (s, v) in summary.iter_mut().zip(&dense) {
            *s += v;
        }
        planes.push(sparse(&dense, width));
    }
    planes[0] = sparse(&summary, width);
    planes
}

/// Dense values of one thread, from its point `values`: per ctxId (0 the global context), per
/// metric id.
fn propagate(ex: &Experiment, values: &[&PointValue], width: usize) -> Vec<f64> {
    let n = SCOPES.len();
    let mut v = vec![0.0; (ex.contexts.len() + 1) * width];
    for p in values {
        let base = (p.ctx + 1) * width + n * p.metric;
        for s in 0..n {
            v[base + s] += p.value;
        }
    }
    // Children come after their parents: one reverse pass folds every subtree.
    for (i, c) in ex.contexts.iter().enumerate().rev() {
        let parent = c.parent.map_or(0, |p| p + 1);
        let lexical = c.relation == Relation::Lexical && c.parent.is_some();
        for m in 0..ex.metrics.len() {
            let (from, to) = ((i + 1) * width + n * m, parent * width + n * m);
            v[to + 2] += v[from + 2];
            if lexical {
                v[to + 1] += v[from + 1];
            }
        }
    }
    v
}

/// The non-zero values of a dense plane.
fn sparse(dense: &[f64], width: usize) -> Plane {
    dense
        .chunks(width)
        .enumerate()
        .filter_map(|(ctx, row)| {
            let vals: Vec<(u16, f64)> = row
                .iter()
                .enumerate()
                .filter(|(_, &v)| v != 0.0)
                .map(|(m, &v)| (m as u16, v))
                .collect();
            (!vals.is_empty()).then_some((ctx as u32, vals))
        })
        .collect()
}

/// The bytes of `profile.db`: one value block per plane, identifier tuples, profile infos.
pub(crate) fn profile_db(ex: &Experiment, planes: &[Plane]) -> Vec<u8> {
    let mut out = Out::default();
    out.header(b"prof", 0, 2);
    let mut blocks = Vec::new();
    for plane in planes {
        let values = out.align(8);
        for (_, vals) in plane {
            for (m, v) in vals {
                out.put(&m.to_le_bytes());
                out.put(&v.to_le_bytes());
            }
        }
        let indices = out.align(8);
        let mut start = 0u64;
        for (ctx, vals) in plane {
            out.put(&ctx.to_le_bytes());
            out.put(&start.to_le_bytes());
            start += vals.len() as u64;
        }
        blocks.push((start, values, plane.len() as u32, indices));
    }
    let tuples_start = out.align(8);
    let rank = ID_KINDS.iter().position(|k| *k == "RANK").unwrap_or(2) as u8;
    let mut tuples = vec![0];
    for &(profile, tid) in &ex.threads {
        tuples.push(out.align(8));
        out.put(&2u16.to_le_bytes());
        out.put(&[0; 6]);
        for (kind, id) in [(rank, profile), (rank + 1, tid)] {
            out.put(&[kind, 0, 0, 0]);
            out.put(&id.to_le_bytes());
            out.put(&u64::from(id).to_le_bytes());
        }
    }
    out.section(1, tuples_start);
    let infos = out.align(8);
    out.reserve(16);
    let array = out.pos();
    for (i, &(n_values, values, n_ctxs, indices)) in blocks.iter().enumerate() {
        out.put(&n_values.to_le_bytes());
        out.put(&values.to_le_bytes());
        out.put(&n_ctxs.to_le_bytes());
        out.put(&[0; 4]);
        out.put(&indices.to_le_bytes());
        out.put(&tuples[i].to_le_bytes());
        out.put(&u32::from(i == 0).to_le_bytes());
        out.put(&[0; 4]);
    }
    out.set_u64(infos, array);
    out.set_u32(infos + 8, blocks.len() as u32);
    out.set_u8(infos + 0xc, 0x30);
    out.section(0, infos);
    out.put(b"_prof.db");
    out.bytes
}

/// The bytes of `cct.db`: per context (ctxId 0 included), its values by metric, then by
/// thread profile (the summary profile is not included, as the format says).
pub(crate) fn cct_db(ex: &Experiment, planes: &[Plane]) -> Vec<u8> {
    // (ctxId, metric, profile index, value), sorted context-major.
    let mut all: Vec<(u32, u16, u32, f64)> = Vec::new();
    for (prof, plane) in planes.iter().enumerate().skip(1) {
        for (ctx, vals) in plane {
            all.extend(vals.iter().map(|&(m, v)| (*ctx, m, prof as u32, v)));
        }
    }
    all.sort_by_key(|&(c, m, p, _)| (c, m, p));
    let mut out = Out::default();
    out.header(b"ctxt", 0, 1);
    let n_ctxs = ex.contexts.len() + 1;
    let mut blocks = vec![(0u64, 0u64, 0u16, 0u64); n_ctxs];
    for group in all.chunk_by(|a, b| a.0 == b.0) {
        let values = out.align(8);
        for &(_, _, p, v) in group {
            out.put(&p.to_le_bytes());
            out.put(&v.to_le_bytes());
        }
        let indices = out.align(8);
        let mut n_metrics = 0u16;
        for (k, &(_, m, _, _)) in group.iter().enumerate() {
            if k == 0 || group[k - 1].1 != m {
                out.put(&m.to_le_bytes());
                out.put(&(k as u64).to_le_bytes());
                n_metrics += 1;
            }
        }
        blocks[group[0].0 as usize] = (group.len() as u64, values, n_metrics, indices);
    }
    let infos = out.align(8);
    out.reserve(16);
    let array = out.pos();
    for (n_values, values, n_metrics, indices) in blocks {
        out.put(&n_values.to_le_bytes());
        out.put(&values.to_le_bytes());
        out.put(&n_metrics.to_le_bytes());
        out.put(&[0; 6]);
        out.put(&indices.to_le_bytes());
    }
    out.set_u64(infos, array);
    out.set_u32(infos + 8, n_ctxs as u32);
    out.set_u8(infos + 0xc, 0x20);
    out.section(0, infos);
    out.put(b"__ctx.db");
    out.bytes
}
