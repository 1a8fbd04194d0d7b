//! Python frames spliced into a native path. Each activation of CPython's evaluator
//! (`_PyEval_EvalFrameDefault`) on the native stack runs a run of Python frames (calls from
//! Python to Python stay in one activation; a call through C, such as a callback, starts
//! another); the frame reader lists every Python frame of the thread with where one
//! activation's run begins. The runs are matched to the evaluator's native frames innermost
//! first, and only where their numbers agree: the same on a whole path, no fewer runs on a
//! path cut short (its outer activations are in the part lost). Otherwise the sample keeps its
//! native frames alone, and is counted as such.

use crate::sampler::python::bpf::PyFrame;

/// The runs of Python frames of a thread's frame list (innermost first, as the frame reader
/// writes it: code 0 is an activation's entry frame, which ends the run inside it (3.12 on);
/// bit 0 of an instruction pointer marks an activation's first frame, which ends its run
/// (3.11)), innermost first, each innermost first.
pub(crate) fn activations(frames: &[PyFrame]) -> Vec<&[PyFrame]> {
    let mut runs = Vec::new();
    let mut start = 0;
    for (i, &PyFrame { code, instr, .. }) in frames.iter().enumerate() {
        if code == 0 {
            runs.push(&frames[start..i]);
            start = i + 1;
        } else if instr & 1 == 1 {
            runs.push(&frames[start..=i]);
            start = i + 1;
        }
    }
    if start < frames.len() {
        runs.push(&frames[start..]);
    }
    runs
}

/// `native` (outermost first) with each evaluator frame followed by the Python frames of the
/// activation it ran (`runs`, innermost first, each innermost first), where the two agree
/// (see the module's documentation); `complete`: the native path reaches the thread's root.
pub(crate) fn splice<T: Copy>(
    native: &[T],
    is_evaluator: impl Fn(&T) -> bool,
    runs: &[Vec<T>],
    complete: bool,
) -> Option<Vec<T>> {
    let evaluators = native.iter().filter(|f| is_evaluator(f)).count();
    if evaluators > runs.len() || (complete && evaluators != runs.len()) {
        return None;
    }
    let mut out = Vec::with_capacity(native.len() + runs.iter().map(Vec::len).sum::<usize>());
    let mut left = evaluators;
    for f in native {
        out.push(*f);
        if is_evaluator(f) {
            left -= 1;
            out.extend(runs[left].iter().rev());
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames of (code, instruction pointer).
    fn frames(list: &[(u64, u64)]) -> Vec<PyFrame> {
        (list.iter())
            .map(|&(code, instr)| PyFrame {
                code,
                instr,
                name: 0,
                first_line: 0,
            })
            .collect()
    }

    #[test]
    fn runs_end_at_entry_frames_in_either_marking() {
        // 3.12: two Python frames, an entry frame, one more, an entry frame.
        let f = frames(&[(1, 10), (2, 20), (0, 0), (3, 30), (0, 0)]);
        assert_eq!(activations(&f), [&f[..2], &f[3..4]]);
        // 3.11: the activation's first frame carries the mark.
        let f = frames(&[(1, 10), (2, 21), (3, 31)]);
        assert_eq!(activations(&f), [&f[..2], &f[2..]]);
        // An activation that has not pushed its first frame yet: an empty run.
        let f = frames(&[(0, 0), (3, 30), (0, 0)]);
        assert_eq!(activations(&f).len(), 2);
    }

    #[test]
    fn each_evaluator_takes_its_run_innermost_first_and_disagreement_splices_nothing() {
        // Native: main > eval > call > eval > leaf (evaluators are 'E').
        let native = ['m', 'E', 'c', 'E', 'l'];
        let runs = vec![vec!['b', 'a'], vec!['y', 'x']];
        let got = splice(&native, |&f| f == 'E', &runs, true).unwrap();
        assert_eq!(got, ['m', 'E', 'x', 'y', 'c', 'E', 'a', 'b', 'l']);
        // A whole path with one evaluator but two runs: no splice.
        assert!(splice(&['m', 'E'], |&f| f == 'E', &runs, true).is_none());
        // Cut short: its outer run is in the part lost.
        let got = splice(&['E', 'l'], |&f| f == 'E', &runs, false).unwrap();
        assert_eq!(got, ['E', 'a', 'b', 'l']);
        // More evaluators than runs never splice.
        assert!(splice(&['E', 'E', 'E'], |&f| f == 'E', &runs, false).is_none());
    }
}
