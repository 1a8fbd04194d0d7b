//! Local variables by code address: the scopes of a module's functions (the function, the
//! functions inlined into it, lexical blocks) with the variables each declares and where each
//! variable lives at each address, indexed so that one binary search finds the innermost scope
//! executing at an address.
//!
//! Only two kinds of place are kept: a slot at a constant offset from the frame's canonical
//! frame address (CFA), and a general-purpose register. That is what naming a stack address
//! (`[CFA + offset, + size)` covers it) and naming the receiver of an allocation (the
//! variable that holds the pointer in a register) need.

use super::types::TypeId;
use crate::ranges::normalize_ranges;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::ops::Range;

/// Where a variable lives over some addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Place {
    /// At this offset from the frame's canonical frame address (`DW_OP_fbreg` with the
    /// frame base `DW_OP_call_frame_cfa`).
    Cfa(i64),
    /// In this register (DWARF number: 0 = rax, 1 = rdx, 2 = rcx, 3 = rbx, ... 15 = r15).
    Reg(u16),
}

/// A place over a range of addresses (`start..end`; the whole scope is `0..u64::MAX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Placed {
    pub start: u64,
    pub end: u64,
    pub place: Place,
}

/// A local variable or parameter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LocalVar {
    pub name: String,
    pub ty: Option<TypeId>,
    /// Bytes (0 when its type's size is unknown: it then covers no stack address).
    pub size: u64,
    pub places: Vec<Placed>,
}

impl LocalVar {
    /// Where it is at `pc`, if its location says.
    fn place_at(&self, pc: u64) -> Option<Place> {
        self.places
            .iter()
            .find(|p| p.start <= pc && pc < p.end)
            .map(|p| p.place)
    }
}

/// A scope as one unit's walk reads it: indices refer to that unit's scopes.
#[derive(Debug, Clone)]
pub(crate) struct ScopeDraft {
    pub parent: Option<u32>,
    /// The function or inlined function's name; `None` for a lexical block.
    pub name: Option<String>,
    pub ranges: Vec<Range<u64>>,
}

/// The scopes and variables read from one unit.
#[derive(Debug, Default)]
pub(crate) struct UnitFrames {
    pub scopes: Vec<ScopeDraft>,
    /// Each variable with the index of its scope in `scopes`.
    pub vars: Vec<(u32, LocalVar)>,
}

/// A scope of [`Frames`]: its parent, name and variables.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct FrameScope {
    parent: Option<u32>,
    name: Option<String>,
    /// Its variables: `vars[vars_start..vars_end]`.
    vars_start: u32,
    vars_end: u32,
}

/// A run of addresses whose innermost scope is `scope`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Segment {
    start: u64,
    end: u64,
    scope: u32,
}

/// The scopes and local variables of a module, indexed by address.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Frames {
    scopes: Vec<FrameScope>,
    vars: Vec<LocalVar>,
    /// Sorted, disjoint.
    segments: Vec<Segment>,
}

/// A local variable found at an address, before it is turned into a
/// [`crate::variables::LocalHit`].
pub(crate) struct Found<'a> {
    pub var: &'a LocalVar,
    pub scope: &'a str,
    pub start: i64,
}

impl Frames {
    /// Index the scopes and variables of all units. Lexical blocks that declare nothing are
    /// dropped (their code belongs to the enclosing scope as far as variables go).
    pub(crate) fn build(units: Vec<UnitFrames>) -> Frames {
        let mut scopes: Vec<ScopeDraft> = Vec::new();
        let mut vars: Vec<(u32, LocalVar)> = Vec::new();
        for unit in units {
            let base = scopes.len() as u32;
            scopes.extend(unit.scopes.into_iter().map(|mut s| {
                s.parent = s.parent.map(|p| p + base);
                s
            }));
            vars.extend(unit.vars.into_iter().map(|(s, v)| (s + base, v)));
        }
        let mut declares = vec![false; scopes.len()];
        for &(s, _) in &vars {
            declares[s as usize] = true;
        }
        // New index of each kept scope; for a dropped one, its nearest kept ancestor's.
        let mut new_index: Vec<Option<u32>> = Vec::with_capacity(scopes.len());
        let mut frames = Frames::default();
        let mut kept: Vec<(u32, u32, Vec<Range<u64>>)> = Vec::new(); // (new index, depth, ranges)
        let mut depth: Vec<u32> = Vec::with_capacity(scopes.len());
        for (i, s) in scopes.into_iter().enumerate() {
            // Parents precede children in a unit's walk; a bad index reads as no parent.
            let parent = s
                .parent
                .filter(|&p| (p as usize) < i)
                .and_then(|p| new_index[p as usize]);
            let keep = s.name.is_some() || declares[i];
            if keep {
                let d = parent.map_or(0, |p| depth[p as usize] + 1);
                let id = frames.scopes.len() as u32;
                frames.scopes.push(FrameScope {
                    parent,
                    name: s.name,
                    vars_start: 0,
                    vars_end: 0,
                });
                depth.push(d);
                kept.push((id, d, normalize_ranges(s.ranges)));
                new_index.push(Some(id));
            } else {
                new_index.push(parent);
            }
        }
        let mut vars: Vec<(u32, LocalVar)> = vars
            .into_iter()
            .filter_map(|(s, v)| Some((new_index[s as usize]?, v)))
            .collect();
        vars.sort_by_key(|&(s, _)| s);
        for (i, (s, v)) in vars.into_iter().enumerate() {
            let scope = &mut frames.scopes[s as usize];
            if scope.vars_end == 0 {
                scope.vars_start = i as u32;
            }
            scope.vars_end = i as u32 + 1;
            frames.vars.push(v);
        }
        frames.segments = innermost_segments(&kept);
        frames
    }

    /// The innermost scope whose code holds `pc`.
    fn innermost(&self, pc: u64) -> Option<u32> {
        let i = self
            .segments
            .partition_point(|s| s.start <= pc)
            .checked_sub(1)?;
        let seg = self.segments[i];
        (pc < seg.end).then_some(seg.scope)
    }

    /// The scopes holding `pc`, innermost first.
    fn chain(&self, pc: u64) -> impl Iterator<Item = u32> + '_ {
        std::iter::successors(self.innermost(pc), |&s| {
            self.scopes.get(s as usize).and_then(|s| s.parent)
        })
        .take(self.scopes.len())
    }

    /// The name of scope `s`: its own, or its nearest named ancestor's (for a block).
    fn name_of(&self, s: u32) -> Option<&str> {
        std::iter::successors(Some(s), |&s| self.scopes.get(s as usize)?.parent)
            .take(self.scopes.len())
            .find_map(|s| self.scopes.get(s as usize)?.name.as_deref())
    }

    /// The variables of scope `s`.
    fn vars_of(&self, s: u32) -> &[LocalVar] {
        let scope = &self.scopes[s as usize];
        &self.vars[scope.vars_start as usize..scope.vars_end as usize]
    }

    /// The name of the innermost function or inlined function executing at `pc`.
    pub(crate) fn frame_name(&self, pc: u64) -> Option<&str> {
        self.name_of(self.innermost(pc)?)
    }

    /// The first variable, innermost scope first, that lives at `pc` in a stack slot
    /// `[CFA + start, + size)` holding `cfa_offset`.
    pub(crate) fn in_frame(&self, pc: u64, cfa_offset: i64) -> Option<Found<'_>> {
        self.find(pc, |v| match v.place_at(pc) {
            Some(Place::Cfa(start)) => {
                let covers = cfa_offset
                    .checked_sub(start)
                    .is_some_and(|d| d >= 0 && (d as u64) < v.size);
                covers.then_some(start)
            }
            _ => None,
        })
    }

    /// The first variable, innermost scope first, that lives in register `reg` at `pc`.
    pub(crate) fn in_register(&self, pc: u64, reg: u16) -> Option<Found<'_>> {
        self.find(pc, |v| {
            (v.place_at(pc) == Some(Place::Reg(reg))).then_some(0)
        })
    }

    /// The first variable of the scopes at `pc`, innermost first, that `test` accepts, with
    /// what `test` says of it.
    fn find(&self, pc: u64, test: impl Fn(&LocalVar) -> Option<i64>) -> Option<Found<'_>> {
        self.chain(pc).find_map(|s| {
            let (var, start) = self.vars_of(s).iter().find_map(|v| Some((v, test(v)?)))?;
            Some(Found {
                var,
                scope: self.name_of(s).unwrap_or("<unknown>"),
                start,
            })
        })
    }

    /// Number of scopes and of variables kept.
    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.scopes.len(), self.vars.len())
    }
}

/// Disjoint runs of addresses, each with the deepest of the `scopes` (index, depth, sorted
/// disjoint ranges) covering it; where scopes of equal depth overlap (bad DWARF), the later one.
fn innermost_segments(scopes: &[(u32, u32, Vec<Range<u64>>)]) -> Vec<Segment> {
    // (position, is_start, depth, scope): ends sort before starts at the same position.
    let mut events: Vec<(u64, bool, u32, u32)> = Vec::new();
    for (id, depth, ranges) in scopes {
        for r in ranges {
            events.push((r.start, true, *depth, *id));
            events.push((r.end, false, *depth, *id));
        }
    }
    events.sort_unstable();
    let mut active: BTreeSet<(u32, u32)> = BTreeSet::new();
    let mut out: Vec<Segment> = Vec::new();
    let mut i = 0;
    while i < events.len() {
        let pos = events[i].0;
        while let Some(&(p, start, depth, id)) = events.get(i).filter(|e| e.0 == pos) {
            debug_assert_eq!(p, pos);
            if start {
                active.insert((depth, id));
            } else {
                active.remove(&(depth, id));
            }
            i += 1;
        }
        let (Some(&(_, scope)), Some(next)) = (active.last(), events.get(i)) else {
            continue;
        };
        match out.last_mut() {
            Some(last) if last.end == pos && last.scope == scope => last.end = next.0,
            _ => out.push(Segment {
                start: pos,
                end: next.0,
                scope,
            }),
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    fn var(name: &str, size: u64, places: Vec<Placed>) -> LocalVar {
        LocalVar {
            name: name.into(),
            ty: None,
            size,
            places,
        }
    }

    fn whole(place: Place) -> Vec<Placed> {
        vec![Placed {
            start: 0,
            end: u64::MAX,
            place,
        }]
    }

    /// `f` at 0x100..0x200 with `buf` (64 bytes at CFA-80); inlined `g` at 0x140..0x160 with
    /// `tmp` (8 bytes at CFA-16); a block in `g` declaring nothing; `h` at 0x300..0x310 whose
    /// `p` is in rax from 0x304.
    fn frames() -> Frames {
        let scope = |parent, name: Option<&str>, ranges| ScopeDraft {
            parent,
            name: name.map(str::to_string),
            ranges,
        };
        Frames::build(vec![
            UnitFrames {
                scopes: vec![
                    scope(None, Some("f"), vec![0x100..0x200]),
                    scope(Some(0), Some("g"), vec![0x140..0x160]),
                    scope(Some(1), None, vec![0x148..0x150]),
                ],
                vars: vec![
                    (1, var("tmp", 8, whole(Place::Cfa(-16)))),
                    (0, var("buf", 64, whole(Place::Cfa(-80)))),
                ],
            },
            UnitFrames {
                scopes: vec![scope(None, Some("h"), vec![0x300..0x310])],
                vars: vec![(
                    0,
                    var(
                        "p",
                        8,
                        vec![Placed {
                            start: 0x304,
                            end: 0x30c,
                            place: Place::Reg(0),
                        }],
                    ),
                )],
            },
        ])
    }

    #[test]
    fn innermost_scope_first() {
        let f = frames();
        let hit = f.in_frame(0x14c, -10).unwrap();
        assert_eq!(
            (hit.var.name.as_str(), hit.scope, hit.start),
            ("tmp", "g", -16)
        );
        let hit = f.in_frame(0x14c, -80).unwrap();
        assert_eq!((hit.var.name.as_str(), hit.scope), ("buf", "f"));
        assert!(f.in_frame(0x14c, -81).is_none(), "below buf");
        assert!(f.in_frame(0x170, -10).is_none(), "tmp is g's, not f's");
        assert_eq!(f.frame_name(0x14c), Some("g"), "the block is dropped");
        assert_eq!(f.frame_name(0x1ff), Some("f"));
        assert_eq!(f.frame_name(0x200), None);
        assert_eq!(f.counts(), (3, 3));
    }

    #[test]
    fn registers_by_pc() {
        let f = frames();
        assert!(f.in_register(0x302, 0).is_none(), "not yet in rax");
        let hit = f.in_register(0x304, 0).unwrap();
        assert_eq!((hit.var.name.as_str(), hit.scope), ("p", "h"));
        assert!(f.in_register(0x304, 3).is_none());
        assert!(f.in_register(0x30c, 0).is_none());
    }

    #[test]
    fn segments_follow_nesting_and_gaps() {
        let segs = innermost_segments(&[
            (0, 0, vec![0x100..0x200]),
            (1, 1, vec![0x140..0x160, 0x180..0x190]),
            (2, 0, vec![0x200..0x210]),
        ]);
        let got: Vec<(u64, u64, u32)> = segs.iter().map(|s| (s.start, s.end, s.scope)).collect();
        assert_eq!(
            got,
            vec![
                (0x100, 0x140, 0),
                (0x140, 0x160, 1),
                (0x160, 0x180, 0),
                (0x180, 0x190, 1),
                (0x190, 0x200, 0),
                (0x200, 0x210, 2)
            ]
        );
    }
}
