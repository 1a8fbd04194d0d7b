//! Whether a procedure can return to its caller, decided from its instructions alone.

use super::decode::{call_never_returns, classify, Flow};
use super::{CfgEnv, CodeRange};
use fxhash::FxHashSet;
use iced_x86::{Decoder, DecoderOptions, Instruction};

/// True unless no path from the entry (`code[0].start`) reaches a way back to the caller: a
/// return, a jump out of the procedure to a target that may return (a tail call, a `.cold`
/// part) or an indirect jump (a table or a tail call, unknown here). Calls the environment
/// declares noreturn end their path; undecodable bytes and traps end it too. The environment's
/// landing pads are taken as reached (a function may return only from a `catch` block). The
/// environment is asked only about the calls on paths from the entry, in no fixed order.
///
/// Only the instructions on paths from the entry are decoded, each once, and the walk stops at
/// the first way back: most functions return a few instructions in, and this question is asked
/// of every callee at several levels (see the noreturn analysis), so decoding whole procedures
/// here cost more than building their graphs.
pub(super) fn may_return(code: &[CodeRange<'_>], env: &CfgEnv<'_>) -> bool {
    let Some(entry) = code.first().filter(|r| !r.bytes.is_empty()) else {
        return true;
    };
    let pads = env.landing_pads.iter().map(|p| p.pad);
    let mut work: Vec<u64> = std::iter::once(entry.start)
        .chain(pads.filter(|&a| range_at(code, a).is_some()))
        .collect();
    // The set of instructions walked is kept per thread and reused: this runs for every callee
    // at several levels. A nested question (a call on the walk, asked of its callee's code)
    // finds the set taken and makes its own.
    let mut seen = SEEN.with(|s| std::mem::take(&mut *s.borrow_mut()));
    seen.clear();
    let mut returns = false;
    while let Some(start) = work.pop() {
        if walk_returns(code, env, start, &mut seen, &mut work) {
            returns = true;
            break;
        }
    }
    SEEN.with(|s| *s.borrow_mut() = seen);
    returns
}

thread_local! {
    static SEEN: std::cell::RefCell<FxHashSet<u64>> = std::cell::RefCell::default();
}

/// Walk the instructions from `ip` in a straight line until one ends the path or was walked
/// before, marking each in `seen` and pushing the targets of jumps inside the code onto
/// `work`. True when the walk finds a way back to the caller.
fn walk_returns(
    code: &[CodeRange<'_>],
    env: &CfgEnv<'_>,
    mut ip: u64,
    seen: &mut FxHashSet<u64>,
    work: &mut Vec<u64>,
) -> bool {
    let blind = CfgEnv::blind();
    // One decoder per range the walk crosses (a range may end where the next begins).
    while let Some(range) = range_at(code, ip) {
        let bytes = &range.bytes[(ip - range.start) as usize..];
        let mut decoder = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
        let mut insn = Instruction::default();
        while decoder.can_decode() {
            if !seen.insert(ip) {
                return false;
            }
            decoder.decode_out(&mut insn);
            let (falls, jump) = match classify(&insn, &blind) {
                Flow::Return | Flow::Indirect => return true,
                // A jump out of the code: a tail call, or a jump to the function's `.cold`
                // part, which returns unless the environment knows the target does not.
                Flow::Jump(t) | Flow::CondJump(t)
                    if range_at(code, t).is_none() && !(env.is_noreturn)(t) =>
                {
                    return true
                }
                Flow::Jump(t) if range_at(code, t).is_none() => (false, None),
                Flow::CondJump(t) if range_at(code, t).is_none() => (true, None),
                Flow::Jump(t) => (false, Some(t)),
                Flow::CondJump(t) => (true, Some(t)),
                Flow::Call { .. } if call_never_returns(&insn, env) => (false, None),
                Flow::Trap | Flow::Invalid => (false, None),
                Flow::Next | Flow::Call { .. } => (true, None),
            };
            work.extend(jump);
            if !falls {
                return false;
            }
            ip = insn.next_ip();
        }
    }
    // Falling off the end of the code: into whatever follows, which may return.
    true
}

/// The code range holding `addr`.
fn range_at<'c, 'b>(code: &'c [CodeRange<'b>], addr: u64) -> Option<&'c CodeRange<'b>> {
    code.iter()
        .find(|r| addr >= r.start && addr - r.start < r.bytes.len() as u64)
}
