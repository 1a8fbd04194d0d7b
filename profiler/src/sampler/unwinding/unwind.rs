//! Walking one sampled user stack with framehop.
//!
//! The kernel gives us the interrupted registers (IP, SP, BP) and a copy of the stack from SP
//! upwards; framehop's DWARF CFI rules (with frame pointers as fallback) recover one caller after
//! another until the outermost frame, the end of the copy, or a frame it cannot unwind.

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64};
use framehop::{Error as UnwindError, FrameAddress, Unwinder};

use crate::format::db::AddrKind;
use crate::sampler::unwinding::loadmap::ProcessUnwinder;
use crate::sampler::unwinding::stubs::StubRule;

/// The interrupted user state of one sample.
#[derive(Debug, Clone, Copy)]
pub struct StackSample<'a> {
    /// Interrupted instruction pointer.
    pub ip: u64,
    /// Stack pointer; `stack[0]` is the byte at this address.
    pub sp: u64,
    /// Frame pointer (used only where no CFI exists).
    pub bp: u64,
    /// The valid part of the stack copy (`dyn_size` bytes).
    pub stack: &'a [u8],
    /// When it was taken (CLOCK_MONOTONIC ns; 0 where not known).
    pub time: u64,
}

/// One frame found on the stack, innermost first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawFrame {
    /// Runtime address: the IP for the first frame, a return address for the others.
    pub avma: u64,
    /// Whether `avma` is the sampled IP or a return address.
    pub kind: AddrKind,
    /// The stack pointer of the frame's caller just after the call returns (the callee's CFA):
    /// together with the return address it identifies this frame instance on the stack.
    pub sp: u64,
}

/// How a walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkEnd {
    /// The outermost frame was reached.
    Complete,
    /// The stack copy ended before the outermost frame (deep stack).
    Truncated,
    /// A frame could not be unwound (no unwind information, corrupt stack).
    Failed,
}

/// What a walk found beyond its frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Walk {
    /// How it ended.
    pub end: WalkEnd,
    /// For a truncated walk, the canonical frame address (CFA) of its outermost frame: where
    /// that frame ends on the stack, though its caller could not be read.
    pub outer_cfa: Option<u64>,
}

/// Deepest walk attempted; deeper stacks are reported as truncated.
pub const MAX_FRAMES: usize = 100_000;

/// Walk `sample`'s stack, appending frames (innermost first) to `frames`. `stub` gives the
/// rule for a return address into code no module covers that hpcrun-rs recognises (see
/// [`crate::sampler::unwinding::stubs`]); such a frame is unwound by that rule, not framehop's.
/// `is_code` says whether an address is in the process's executable memory: a return address
/// outside it (data that a frame-pointer step through code without unwind information took
/// for one) ends the walk as failed rather than become a frame.
pub fn walk(
    unwinder: &ProcessUnwinder,
    cache: &mut CacheX86_64,
    sample: &StackSample<'_>,
    frames: &mut Vec<RawFrame>,
    stub: &mut dyn FnMut(u64) -> Option<StubRule>,
    is_code: &dyn Fn(u64) -> bool,
) -> Walk {
    let stack_end = sample.sp.saturating_add(sample.stack.len() as u64);
    let mut read = |addr: u64| -> Result<u64, ()> {
        let off = addr.checked_sub(sample.sp).ok_or(())? as usize;
        let bytes = sample
            .stack
            .get(off..off.checked_add(8).ok_or(())?)
            .ok_or(())?;
        Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
    };
    let mut regs = UnwindRegsX86_64::new(sample.ip, sample.sp, sample.bp);
    let mut address = FrameAddress::from_instruction_pointer(sample.ip);
    let done = |end| Walk {
        end,
        outer_cfa: None,
    };
    frames.push(RawFrame {
        avma: sample.ip,
        kind: AddrKind::Ip,
        sp: sample.sp,
    });
    while frames.len() < MAX_FRAMES {
        let rule = (address.is_return_address())
            .then(|| stub(address.address()))
            .flatten();
        let step = match rule {
            Some(rule) => match rule.unwind(regs.sp(), &mut read) {
                Some((ra, sp)) => {
                    regs = UnwindRegsX86_64::new(ra, sp, regs.bp());
                    Ok(Some(ra))
                }
                None => Err(UnwindError::CouldNotReadStack(regs.sp().saturating_add(8))),
            },
            None => unwinder.unwind_frame(address, &mut regs, cache, &mut read),
        };
        match step {
            Ok(Some(ra)) => match FrameAddress::from_return_address(ra) {
                Some(_) if !is_code(ra) => return done(WalkEnd::Failed),
                Some(next) => {
                    address = next;
                    frames.push(RawFrame {
                        avma: ra,
                        kind: AddrKind::Return,
                        sp: regs.sp(),
                    });
                }
                None => return done(WalkEnd::Complete),
            },
            Ok(None) => return done(WalkEnd::Complete),
            Err(UnwindError::CouldNotReadStack(addr)) if addr >= stack_end => {
                let outer_cfa = match rule {
                    Some(_) => regs.sp().checked_add(16),
                    None => cfa_beyond_copy(unwinder, cache, address, regs),
                };
                return Walk {
                    end: WalkEnd::Truncated,
                    outer_cfa,
                };
            }
            Err(_) => return done(WalkEnd::Failed),
        }
    }
    done(WalkEnd::Truncated)
}

/// The CFA of the frame at `address` with registers `regs`, whose caller lies beyond the stack
/// copy: unwound once more with every stack read answered by zero, the highest slot read is
/// the return address, just below the CFA (a saved frame pointer, if read, lies lower still).
fn cfa_beyond_copy(
    unwinder: &ProcessUnwinder,
    cache: &mut CacheX86_64,
    address: FrameAddress,
    mut regs: UnwindRegsX86_64,
) -> Option<u64> {
    let mut highest = None;
    let mut read = |addr: u64| -> Result<u64, ()> {
        highest = highest.max(Some(addr));
        Ok(0)
    };
    let _ = unwinder.unwind_frame(address, &mut regs, cache, &mut read);
    highest.map(|a: u64| a.wrapping_add(8))
}
