//! Whether a procedure can return to its caller, decided from its instructions alone.

use super::decode::{call_never_returns, Decoded, Flow};
use super::{CfgEnv, CodeRange};

/// True unless no path from the entry (`code[0].start`) reaches a way back to the caller: a
/// return, a jump out of the procedure to a target that may return (a tail call, a `.cold`
/// part) or an indirect jump (a table or a tail call, unknown here). Calls the environment
/// declares noreturn end their path; undecodable bytes and traps end it too. The environment's landing pads are taken as
/// reached (a function may return only from a `catch` block). The environment is asked only
/// about the calls on paths from the entry, in no fixed order.
pub(super) fn may_return(code: &[CodeRange<'_>], env: &CfgEnv<'_>) -> bool {
    let d = Decoded::new(code, &CfgEnv::blind());
    let Some(entry) = code.first().and_then(|r| d.index_of(r.start)) else {
        return true;
    };
    let mut seen = vec![false; d.insns.len()];
    let pads = env.landing_pads.iter().filter_map(|p| d.index_of(p.pad));
    let mut work: Vec<usize> = std::iter::once(entry).chain(pads).collect();
    while let Some(i) = work.pop() {
        if std::mem::replace(&mut seen[i], true) {
            continue;
        }
        let next = || {
            let contiguous = d
                .insns
                .get(i + 1)
                .is_some_and(|n| n.ip() == d.insns[i].next_ip());
            contiguous.then_some(i + 1)
        };
        let (step, jump) = match d.flows[i] {
            Flow::Return | Flow::Indirect => return true,
            // A jump out of the code: a tail call, or a jump to the function's `.cold` part,
            // which returns unless the environment knows the target does not.
            Flow::Jump(t) | Flow::CondJump(t) if !d.contains(t) && !(env.is_noreturn)(t) => {
                return true
            }
            Flow::Jump(t) if !d.contains(t) => (None, None),
            Flow::CondJump(t) if !d.contains(t) => (next(), None),
            Flow::Jump(t) => (None, Some(t)),
            Flow::CondJump(t) => (next(), Some(t)),
            Flow::Call { .. } if call_never_returns(&d.insns[i], env) => (None, None),
            Flow::Trap | Flow::Invalid => (None, None),
            Flow::Next | Flow::Call { .. } => match next() {
                Some(n) => (Some(n), None),
                // Falling off the end of the code: into whatever follows, which may return.
                None => return true,
            },
        };
        work.extend(step);
        work.extend(jump.and_then(|t| d.containing(t)));
    }
    false
}
