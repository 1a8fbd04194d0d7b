//! Loop recovery for one procedure: decode, build the CFG, find the loop nesting forest and
//! give each loop its header and begin line.

use crate::analyze::ProcPlan;
use crate::binary::{CodeSection, FunctionSymbol};
use crate::dwarf::DwarfInfo;
use crate::procedure::LoopNest;

/// The loops of procedure `plan`, and a note if its code could not be decoded.
pub fn find_loops(
    _plan: &ProcPlan,
    _info: &DwarfInfo,
    _code: &[CodeSection<'_>],
    _symbols: &[FunctionSymbol],
) -> (LoopNest, Option<String>) {
    (LoopNest::default(), None)
}
