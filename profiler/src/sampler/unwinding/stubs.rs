//! Code without unwind information that hpcrun-rs recognises by its bytes, so that walks go
//! through it instead of stopping there.
//!
//! The one kind known today is CPython's perf trampoline (3.12 and later, with `-X perf`,
//! `-X perf_jit` or `PYTHONPERFSUPPORT=1`): a copy of the same eleven bytes per Python function,
//! in anonymous memory, that calls the interpreter for that function's frame:
//!
//! ```text
//! 48 83 ec 08    sub  $8, %rsp
//! ff d1          call *%rcx        <- the return address points here + 6
//! 48 83 c4 08    add  $8, %rsp
//! c3             ret
//! ```
//!
//! Such a frame has no frame pointer and no CFI, and framehop's frame-pointer fallback reads
//! whatever the interpreter left in `%rbp`: every walk through Python code stopped at its
//! innermost trampoline. Its layout is fixed, though: where the call returns, the trampoline's
//! own return address lies 8 bytes above the stack pointer and its caller's stack pointer 16.
//! The bytes are read from the live process (`process_vm_readv`) once per return address; a
//! process that has exited or cannot be read leaves the walk where it was.

use fxhash::FxHashMap;

/// How to unwind one recognised stub frame, at a return address into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StubRule {
    /// CPython's perf trampoline: return address at `sp + 8`, caller's `sp` at `sp + 16`,
    /// `%rbp` untouched.
    PythonTrampoline,
}

/// The bytes of a CPython perf trampoline that end at the return address of its call.
const TRAMPOLINE_CALL: [u8; 6] = [0x48, 0x83, 0xec, 0x08, 0xff, 0xd1];

impl StubRule {
    /// The stub's caller: its return address and stack pointer, from the stub frame's stack
    /// pointer `sp` (where the call into the stub's callee returns) and a stack reader.
    pub(crate) fn unwind(
        self,
        sp: u64,
        read: &mut impl FnMut(u64) -> Result<u64, ()>,
    ) -> Option<(u64, u64)> {
        match self {
            StubRule::PythonTrampoline => {
                let ra = read(sp.checked_add(8)?).ok()?;
                Some((ra, sp.checked_add(16)?))
            }
        }
    }

    /// The rule for code whose last bytes before a return address are `before`, if known.
    fn recognise(before: &[u8; 6]) -> Option<StubRule> {
        (*before == TRAMPOLINE_CALL).then_some(StubRule::PythonTrampoline)
    }
}

/// One process's recognised stubs, by return address (a process's trampolines are never
/// freed; an `exec` starts a new address space and a new cache).
#[derive(Debug, Clone, Default)]
pub(crate) struct Stubs {
    known: FxHashMap<u64, Option<StubRule>>,
}

impl Stubs {
    /// The rule for the stub that return address `ra` of process `pid` returns into, if the
    /// code before it is one hpcrun-rs knows; the caller checks that no module covers `ra`.
    pub(crate) fn rule(&mut self, pid: u32, ra: u64) -> Option<StubRule> {
        if let Some(rule) = self.known.get(&ra) {
            return *rule;
        }
        let bytes = read_code(pid, ra.checked_sub(TRAMPOLINE_CALL.len() as u64)?)?;
        let rule = StubRule::recognise(&bytes);
        self.known.insert(ra, rule);
        rule
    }
}

/// Six bytes of process `pid`'s memory at `at`, if it can still be read.
fn read_code(pid: u32, at: u64) -> Option<[u8; 6]> {
    let mut bytes = [0u8; 6];
    crate::sampler::capture::memory::read_process(pid, at, &mut bytes).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trampoline_is_known_by_its_call_and_nothing_else_is() {
        assert_eq!(
            StubRule::recognise(&TRAMPOLINE_CALL),
            Some(StubRule::PythonTrampoline)
        );
        // A frame-pointer prologue before the same call is framehop's to unwind.
        assert_eq!(
            StubRule::recognise(&[0x55, 0x48, 0x89, 0xe5, 0xff, 0xd1]),
            None
        );
    }

    #[test]
    fn a_trampoline_frame_returns_to_the_word_above_its_slot() {
        let stack = [0u64, 0xdead, 0x4242];
        let sp = 0x1000;
        let mut read = |a: u64| -> Result<u64, ()> {
            let i = (a.checked_sub(sp).ok_or(())? / 8) as usize;
            stack.get(i).copied().ok_or(())
        };
        assert_eq!(
            StubRule::PythonTrampoline.unwind(sp, &mut read),
            Some((0xdead, sp + 16))
        );
    }

    #[test]
    fn a_trampoline_in_memory_is_read_and_recognised() {
        let code = [
            0x90u8, 0x48, 0x83, 0xec, 0x08, 0xff, 0xd1, 0x48, 0x83, 0xc4, 0x08, 0xc3,
        ];
        let ra = code.as_ptr() as u64 + 7;
        let mut stubs = Stubs::default();
        assert_eq!(
            stubs.rule(std::process::id(), ra),
            Some(StubRule::PythonTrampoline)
        );
    }

    #[test]
    fn this_process_own_code_is_read_and_not_taken_for_a_trampoline() {
        let mut stubs = Stubs::default();
        let here = Stubs::rule as *const () as u64 + 16;
        assert_eq!(stubs.rule(std::process::id(), here), None);
        assert_eq!(stubs.known.len(), 1, "the answer is remembered");
    }
}
