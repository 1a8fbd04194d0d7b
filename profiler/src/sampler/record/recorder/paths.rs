//! A sample's path into its thread's tree: unwound from the stack copy, resolved to modules,
//! and, where the copy was too short for the whole stack, completed from the thread's previous
//! complete path when the frame at the edge of the copy is provably the same frame.

use framehop::x86_64::CacheX86_64;

use crate::format::addr::Avma;
use crate::format::db::{AddrKind, CctNodeId, Frame};
use crate::sampler::unwinding::loadmap::AddressSpace;
use crate::sampler::unwinding::unwind::{walk, RawFrame, StackSample, Walk, WalkEnd};

use super::{process_entry, PathEntry, PathOutcome, Recorder, ThreadState};

/// What walking one sampled stack reuses from the last: framehop's cache of unwind rules, the
/// frame and path buffers, and where the last truncated walk ended.
pub(crate) struct Walking {
    pub(super) cache: CacheX86_64,
    pub(super) frames: Vec<RawFrame>,
    pub(super) path: Vec<Frame>,
    /// Per frame of the walk, the jitdump load of its JIT code, if any.
    pub(super) loads: Vec<Option<u32>>,
    /// The outermost CFA of the last truncated walk (see
    /// [`crate::sampler::unwinding::unwind::Walk`]).
    pub(super) outer_cfa: Option<u64>,
}

impl Default for Walking {
    fn default() -> Walking {
        Walking {
            cache: CacheX86_64::new(),
            frames: Vec::new(),
            path: Vec::new(),
            loads: Vec::new(),
            outer_cfa: None,
        }
    }
}

impl Recorder {
    /// Unwind `sample`'s user stack from its IP (of kind `leaf`: the interrupted instruction,
    /// or the return address of a call in progress) and insert the path; returns the leaf node
    /// and how the path was completed.
    pub(super) fn insert_user_path(
        &mut self,
        pid: u32,
        tid: u32,
        sample: &StackSample<'_>,
        leaf: AddrKind,
    ) -> (CctNodeId, PathOutcome) {
        let mut frames = std::mem::take(&mut self.walk.frames);
        let mut walked = self.walk_stack(pid, sample, &mut frames);
        // JIT code whose unwinding records its jitdump has added since: walked again with them.
        // The dump is read at most once per sample, for what the program appended since.
        let space = &mut process_entry(&mut self.processes, pid).space;
        let read = frames.iter().any(|f| space.may_learn_jit(f.avma));
        if read && space.learn_jit() {
            walked = self.walk_stack(pid, sample, &mut frames);
        }
        self.walk.outer_cfa = walked.outer_cfa;
        frames[0].kind = leaf;
        // JIT code a jitdump loaded: which of its loads was there when the sample was taken.
        let space = &mut process_entry(&mut self.processes, pid).space;
        let unmapped = || frames.iter().any(|f| space.resolve(Avma(f.avma)).is_none());
        if !read && space.has_jitdump() && unmapped() {
            space.learn_jit();
        }
        self.walk.loads.clear();
        (self.walk.loads).extend(frames.iter().map(|f| space.jit_load(f.avma, sample.time)));
        let inserted = self.insert_frames((pid, tid, sample.time), &frames, walked.end);
        self.walk.frames = frames;
        inserted
    }

    /// Walk `sample`'s stack in process `pid` into `frames` (cleared first).
    fn walk_stack(
        &mut self,
        pid: u32,
        sample: &StackSample<'_>,
        frames: &mut Vec<RawFrame>,
    ) -> Walk {
        frames.clear();
        let process = process_entry(&mut self.processes, pid);
        let (space, stubs) = (&process.space, &mut process.stubs);
        let mut stub = |ra: u64| match space.resolve(Avma(ra.wrapping_sub(1))) {
            Some(_) => None,
            None => stubs.rule(pid, ra),
        };
        let is_code = |avma: u64| space.is_code(avma);
        walk(
            &space.unwinder,
            &mut self.walk.cache,
            sample,
            frames,
            &mut stub,
            &is_code,
        )
    }

    /// Frame `f` of a path, in JIT code of jitdump load `load` if that is known.
    fn frame_of(space: &AddressSpace, f: &RawFrame, load: Option<u32>) -> Frame {
        let (avma, kind) = (Avma(f.avma), f.kind);
        match (space.resolve(avma), load) {
            (Some((module, addr)), _) => Frame::Code { module, addr, kind },
            (None, Some(load)) => Frame::Jit { avma, kind, load },
            (None, None) => Frame::Unmapped { avma, kind },
        }
    }

    fn insert_frames(
        &mut self,
        (pid, tid, time): (u32, u32, u64),
        frames: &[RawFrame],
        end: WalkEnd,
    ) -> (CctNodeId, PathOutcome) {
        let space = &self.processes[&pid].space;
        let thread = self.threads.get_mut(&tid).expect("thread exists");
        self.walk.path.clear();
        self.walk.path.extend(
            (frames.iter().zip(&self.walk.loads).rev()).map(|(f, &l)| Self::frame_of(space, f, l)),
        );

        // A walk that stops at the return into an entry point's first call (the dynamic
        // loader's `_start`, which has no unwind information) did reach the root, as did one
        // whose only frame is the entry point itself (the process's first instruction).
        let at_entry = |f: &RawFrame| match f.kind {
            AddrKind::Return => space.is_entry_return(Avma(f.avma)),
            _ => frames.len() == 1 && space.is_entry_point(Avma(f.avma)),
        };
        let complete = end == WalkEnd::Complete || frames.last().is_some_and(at_entry);
        // Python's frames spliced in: such a path is never completed from another, whose
        // Python frames may differ under the same native frames.
        let python = (self.python.as_mut())
            .and_then(|p| p.splice((pid, tid, time), &self.walk.path, complete));
        if let Some(path) = python {
            thread.last_path.clear();
            let top = match complete {
                true => CctNodeId::ROOT,
                false => thread.cct.child(CctNodeId::ROOT, Frame::Partial),
            };
            let leaf = thread.cct.insert_path(top, path);
            let outcome = [PathOutcome::Partial, PathOutcome::Complete][complete as usize];
            return (leaf, outcome);
        }
        if complete {
            let leaf = insert_remembered(thread, frames, &self.walk.path, CctNodeId::ROOT, 0);
            return (leaf, PathOutcome::Complete);
        }
        // Truncated: complete from the previous path if its frame at the edge is ours.
        if end == WalkEnd::Truncated {
            if let Some(edge) = frames.last().filter(|f| f.kind == AddrKind::Return) {
                if let Some(j) = thread
                    .last_path
                    .iter()
                    .rposition(|e| e.sp == edge.sp && e.ra == edge.avma)
                {
                    let anchor = thread.last_path[j].node;
                    let inner = &frames[..frames.len() - 1];
                    let leaf =
                        insert_remembered(thread, inner, &self.walk.path[1..], anchor, j + 1);
                    return (leaf, PathOutcome::Stitched);
                }
            }
        }
        let partial = thread.cct.child(CctNodeId::ROOT, Frame::Partial);
        let leaf = thread
            .cct
            .insert_path(partial, self.walk.path.iter().copied());
        (leaf, PathOutcome::Partial)
    }
}

/// Insert a complete path below `start` (`frames` innermost first, `path` the same frames
/// resolved, outermost first) and remember its return-address frames as the thread's last
/// complete path, after the first `keep` entries already there. Returns the leaf.
fn insert_remembered(
    thread: &mut ThreadState,
    frames: &[RawFrame],
    path: &[Frame],
    start: CctNodeId,
    keep: usize,
) -> CctNodeId {
    thread.last_path.truncate(keep);
    let mut node = start;
    for (raw, frame) in frames.iter().rev().zip(path) {
        node = thread.cct.child(node, *frame);
        if raw.kind == AddrKind::Return {
            thread.last_path.push(PathEntry {
                sp: raw.sp,
                ra: raw.avma,
                node,
            });
        }
    }
    node
}
