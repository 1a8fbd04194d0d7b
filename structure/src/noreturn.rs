//! Functions that never return, so that a call to one ends its basic block.
//!
//! Three sources, from cheapest to dearest: names every C, C++ and Rust runtime uses for such
//! functions (matched against symbols and against the imports behind PLT stubs and GOT slots),
//! the `DW_AT_noreturn` declarations of the calling unit (see [`crate::dwarf::NoReturn`]), and
//! analysis: a function symbol whose code has no path back to its caller (an assertion helper
//! that ends in `abort@plt`, a fatal-error function the compiler was not told about). The
//! analysis is done on first use per callee, follows calls a few levels deep and depends on
//! nothing but the code and the names, so a whole-module and a focused analysis agree.

use crate::binary::{bytes_from, CodeSection, FunctionSymbol};
use crate::cfg::{Cfg, CfgEnv, CodeRange};
use crate::demangle::demangle;
use crate::imports::Imports;
use crate::landing::ExceptionTables;
use fxhash::{FxHashMap, FxHashSet};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

/// Names of functions known never to return, matched against (demangled) symbol names.
const NORETURN_NAMES: &[&str] = &[
    "exit",
    "_exit",
    "_Exit",
    "quick_exit",
    "abort",
    "longjmp",
    "siglongjmp",
    "pthread_exit",
    "__stack_chk_fail",
    "__assert_fail",
    "__assert_perror_fail",
    "__cxa_throw",
    "__cxa_rethrow",
    "__cxa_bad_cast",
    "__cxa_bad_typeid",
    "__cxa_throw_bad_array_new_length",
    "__cxa_call_terminate",
    "_Unwind_Resume",
    "std::terminate()",
    "__fortify_fail",
    "__chk_fail",
    "_gfortran_stop_string",
    "_gfortran_error_stop_string",
    "_gfortran_runtime_error",
    "_gfortran_runtime_error_at",
    "_gfortran_os_error_at",
    "core::option::unwrap_failed",
    "core::option::expect_failed",
    "core::result::unwrap_failed",
    "alloc::alloc::handle_alloc_error",
    "alloc::raw_vec::handle_error",
    "alloc::raw_vec::capacity_overflow",
    "std::process::exit",
    "std::process::abort",
];

/// Name prefixes of families of functions that never return: libstdc++'s `std::__throw_*`
/// helpers and Rust's `core::panicking` functions.
const NORETURN_PREFIXES: &[&str] = &["std::__throw_", "core::panicking::"];

/// True if a function of this (demangled) name never returns.
fn is_noreturn_name(name: &str) -> bool {
    NORETURN_NAMES.contains(&name) || NORETURN_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// How deep the analysis follows calls: a function is found noreturn when every path of it ends
/// in a call to a named one (level 1), or to one found at level 1 (level 2), and so on. Each
/// level is a function of the code and the names only, whatever the order of the questions.
/// Node.js needs five: its out-of-memory handler ends in `V8_Fatal`, which calls `OS::Abort`,
/// whose `.cold` part calls `abort` (with three, 23 more of its loops were irreducible; with
/// eight, none fewer).
const LEVELS: usize = 5;

/// Whether a call target never returns, by name or by analysis of its code.
pub(crate) struct NoReturns<'a, 'd> {
    /// Addresses (symbols, PLT stubs, GOT slots) whose names say they never return.
    named: FxHashSet<u64>,
    /// GOT slots holding the address of a function of the module.
    local_slots: &'a FxHashMap<u64, u64>,
    symbols: &'a [FunctionSymbol],
    code: &'a [CodeSection<'d>],
    /// Exception tables and the sections to read them from: a function may return through a
    /// landing pad only.
    exceptions: &'a ExceptionTables,
    data: &'a [CodeSection<'d>],
    /// The analysis's answer per symbol (same order as `symbols`) and level, once asked.
    analysed: Vec<[OnceLock<bool>; LEVELS]>,
    /// Per symbol, an answer that holds at every level ([`UNKNOWN`] until one is found).
    every_level: Vec<AtomicU8>,
}

/// [`NoReturns::every_level`]: no answer for every level yet.
const UNKNOWN: u8 = 0;
/// [`NoReturns::every_level`]: the function may return, whatever the level.
const RETURNS: u8 = 1;
/// [`NoReturns::every_level`]: the function never returns, whatever the level.
const NEVER_RETURNS: u8 = 2;

impl<'a, 'd> NoReturns<'a, 'd> {
    /// The named ones among `symbols` and `imports`; `symbols` sorted by address, one per
    /// address.
    pub(crate) fn new(
        symbols: &'a [FunctionSymbol],
        imports: &'a Imports,
        code: &'a [CodeSection<'d>],
        exceptions: &'a ExceptionTables,
        data: &'a [CodeSection<'d>],
    ) -> Self {
        let by_symbol = symbols
            .iter()
            .filter(|s| is_noreturn_name(&s.name))
            .map(|s| s.address);
        let by_import = imports
            .names
            .iter()
            .filter(|(_, link)| is_noreturn_name(&demangle(link)))
            .map(|(&a, _)| a);
        NoReturns {
            named: by_symbol.chain(by_import).collect(),
            local_slots: &imports.local_slots,
            symbols,
            code,
            exceptions,
            data,
            analysed: symbols.iter().map(|_| Default::default()).collect(),
            every_level: symbols.iter().map(|_| AtomicU8::new(UNKNOWN)).collect(),
        }
    }

    /// True if a call to `target` never returns.
    pub(crate) fn contains(&self, target: u64) -> bool {
        self.at_level(target, LEVELS)
    }

    /// `target` may be a function, a PLT stub or a GOT slot (for calls through memory).
    fn at_level(&self, target: u64, level: usize) -> bool {
        self.judged(target, level).0
    }

    /// Whether a call to `target` never returns at `level`, and whether the answer may differ
    /// at another level: it does not for a name, nor for what is no function of the module.
    fn judged(&self, target: u64, level: usize) -> (bool, bool) {
        let target = self.local_slots.get(&target).copied().unwrap_or(target);
        if self.named.contains(&target) {
            return (true, false);
        }
        match self.symbols.binary_search_by_key(&target, |s| s.address) {
            Ok(i) => (self.by_analysis(i, level), true),
            Err(_) => (false, false),
        }
    }

    /// True if the code of `symbols[i]` cannot return when calls are judged at the level below
    /// (see [`LEVELS`]); decided on first use.
    fn by_analysis(&self, i: usize, level: usize) -> bool {
        let Some(below) = level.checked_sub(1) else {
            return false;
        };
        match self.every_level[i].load(Ordering::Relaxed) {
            RETURNS => return false,
            NEVER_RETURNS => return true,
            _ => {}
        }
        *self.analysed[i][below].get_or_init(|| {
            let (never_returns, by_level) = self.analyse(i, below);
            if !by_level {
                // No answer of the walk depended on the level: it holds at every level. Kept
                // apart from the levels' cells, which another thread may be filling: setting
                // one of those would wait for it, and it may be waiting for this one.
                let answer = [RETURNS, NEVER_RETURNS][usize::from(never_returns)];
                self.every_level[i].store(answer, Ordering::Relaxed);
            }
            never_returns
        })
    }

    /// Whether the code of `symbols[i]` cannot return when its calls are judged at level
    /// `below`, and whether that depended on the level: on the analysis of a callee, whose
    /// answer may change from level to level (the names' answers do not).
    fn analyse(&self, i: usize, below: usize) -> (bool, bool) {
        let s = &self.symbols[i];
        let end = s.address.saturating_add(s.size);
        let Some(bytes) = self.code.iter().find_map(|c| c.slice(s.address, end)) else {
            return (false, false);
        };
        if bytes.is_empty() {
            return (false, false);
        }
        let by_level = std::cell::Cell::new(false);
        let callee = |a: u64| {
            let (never_returns, may_differ) = self.judged(a, below);
            if may_differ {
                by_level.set(true);
            }
            never_returns
        };
        let pads = self
            .exceptions
            .pads(s.address, |a| bytes_from(self.data, a));
        let env = CfgEnv {
            is_noreturn: &callee,
            read_data: &|_, _| None,
            landing_pads: &pads,
        };
        let code = [CodeRange {
            start: s.address,
            bytes,
        }];
        (!Cfg::may_return(&code, &env), by_level.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `f1` calls `abort`, each `f{k+1}` calls `f{k}`, none has another way out: a chain of
    /// fatal-error helpers, found noreturn as deep as [`LEVELS`] goes and no deeper.
    #[test]
    fn a_chain_of_calls_to_a_noreturn_function_is_followed_as_deep_as_the_levels_go() {
        const ABORT: u64 = 0x1000;
        const BASE: u64 = 0x2000;
        // Each function: `call` the one before it (5 bytes), `ret` if that returns, padding.
        let depth = LEVELS + 1;
        let mut bytes = Vec::new();
        let mut symbols = vec![FunctionSymbol {
            address: ABORT,
            size: 1,
            link_name: "abort".into(),
            name: "abort".into(),
        }];
        for k in 0..depth as u64 {
            let at = BASE + 16 * k;
            let callee = if k == 0 { ABORT } else { at - 16 };
            bytes.push(0xe8);
            bytes.extend_from_slice(&((callee as i64 - (at as i64 + 5)) as i32).to_le_bytes());
            bytes.push(0xc3);
            bytes.extend_from_slice(&[0xcc; 10]);
            symbols.push(FunctionSymbol {
                address: at,
                size: 16,
                link_name: format!("f{}", k + 1),
                name: format!("f{}", k + 1),
            });
        }
        let code = [CodeSection {
            address: BASE,
            bytes: &bytes,
        }];
        let (imports, exceptions) = (Imports::default(), ExceptionTables::default());
        let noreturns = NoReturns::new(&symbols, &imports, &code, &exceptions, &[]);
        let found: Vec<bool> = (0..depth as u64)
            .map(|k| noreturns.contains(BASE + 16 * k))
            .collect();
        let mut want = vec![true; LEVELS];
        want.push(false);
        assert_eq!(found, want);
    }
}
