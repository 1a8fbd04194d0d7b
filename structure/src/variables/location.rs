//! Location descriptions (`DW_AT_location`, `DW_AT_frame_base`) reduced to the places a data
//! layout keeps: a static address, a slot at a constant offset from the canonical frame
//! address, a general-purpose register.
//!
//! Only one-operation descriptions are understood; anything longer (pieces, computed values,
//! `DW_OP_entry_value`, `DW_OP_stack_value`, register-relative addresses such as
//! `DW_OP_breg7` on rsp) is passed over: what is kept must name storage exactly.

use super::frames::{Place, Placed};
use crate::dwarf::Slice;
use gimli::{AttributeValue, Operation};

/// The highest DWARF register number of a general-purpose register on x86-64 (r15).
const LAST_GP_REGISTER: u16 = 15;

/// What a variable's location says.
pub(crate) enum Located {
    /// A static variable at this link-time address (`DW_OP_addr`, `DW_OP_addrx`).
    Static(u64),
    /// A local variable, in these places (none kept: empty).
    Places(Vec<Placed>),
}

/// The one operation of a one-operation expression, if it is one the layout keeps.
#[derive(Debug, PartialEq)]
enum Single {
    Address(u64),
    AddressIndex(gimli::DebugAddrIndex<usize>),
    FrameOffset(i64),
    Register(u16),
    CallFrameCfa,
}

/// Read `expr` as a single operation.
fn single(encoding: gimli::Encoding, expr: gimli::Expression<Slice<'_>>) -> Option<Single> {
    let mut ops = expr.operations(encoding);
    let op = ops.next().ok()??;
    if !matches!(ops.next(), Ok(None)) {
        return None;
    }
    match op {
        Operation::Address { address } => Some(Single::Address(address)),
        Operation::AddressIndex { index } => Some(Single::AddressIndex(index)),
        Operation::FrameOffset { offset } => Some(Single::FrameOffset(offset)),
        Operation::Register { register } if register.0 <= LAST_GP_REGISTER => {
            Some(Single::Register(register.0))
        }
        Operation::CallFrameCFA => Some(Single::CallFrameCfa),
        _ => None,
    }
}

/// The place `op` names; `cfa_base` whether frame-base offsets are CFA offsets.
fn place_of(op: Option<Single>, cfa_base: bool) -> Option<Place> {
    match op {
        Some(Single::FrameOffset(offset)) if cfa_base => Some(Place::Cfa(offset)),
        Some(Single::Register(r)) => Some(Place::Reg(r)),
        _ => None,
    }
}

/// Whether `DW_AT_frame_base` value `value` is `DW_OP_call_frame_cfa` (GCC's on x86-64; a
/// frame base in a register, as clang gives some functions, is not kept).
pub(crate) fn frame_base_is_cfa(
    unit: &gimli::Unit<Slice<'_>>,
    value: Option<AttributeValue<Slice<'_>>>,
) -> bool {
    let expr = value.and_then(|v| v.exprloc_value());
    expr.and_then(|e| single(unit.encoding(), e)) == Some(Single::CallFrameCfa)
}

/// What location `value` says; `cfa_base` whether frame-base offsets are CFA offsets (the
/// enclosing function's frame base is the CFA). A location list is read entry by entry; an
/// unreadable one yields the entries read before the error.
pub(crate) fn locate(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    unit: &gimli::Unit<Slice<'_>>,
    value: AttributeValue<Slice<'_>>,
    cfa_base: bool,
) -> Located {
    if let Some(expr) = value.exprloc_value() {
        let op = single(unit.encoding(), expr);
        match op {
            Some(Single::Address(a)) => return Located::Static(a),
            Some(Single::AddressIndex(i)) => match dwarf.address(unit, i) {
                Ok(a) => return Located::Static(a),
                Err(_) => return Located::Places(Vec::new()),
            },
            _ => {}
        }
        let whole = place_of(op, cfa_base).map(|place| Placed {
            start: 0,
            end: u64::MAX,
            place,
        });
        return Located::Places(whole.into_iter().collect());
    }
    let mut out = Vec::new();
    if let Ok(Some(mut list)) = dwarf.attr_locations(unit, value) {
        while let Ok(Some(entry)) = list.next() {
            if entry.range.begin >= entry.range.end {
                continue;
            }
            if let Some(place) = place_of(single(unit.encoding(), entry.data), cfa_base) {
                out.push(Placed {
                    start: entry.range.begin,
                    end: entry.range.end,
                    place,
                });
            }
        }
    }
    Located::Places(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gimli::{EndianSlice, LittleEndian};

    fn op(bytes: &[u8]) -> Option<Single> {
        let encoding = gimli::Encoding {
            format: gimli::Format::Dwarf32,
            version: 5,
            address_size: 8,
        };
        single(
            encoding,
            gimli::Expression(EndianSlice::new(bytes, LittleEndian)),
        )
    }

    #[test]
    fn one_operation_locations() {
        // DW_OP_fbreg -262160 (sleb128 f0 ff 6f): a CFA slot only under a CFA frame base.
        let fbreg = || op(&[0x91, 0xf0, 0xff, 0x6f]);
        assert_eq!(place_of(fbreg(), true), Some(Place::Cfa(-262160)));
        assert_eq!(place_of(fbreg(), false), None);
        assert_eq!(
            op(&[0x03, 0x60, 0x40, 0, 0, 0, 0, 0, 0]),
            Some(Single::Address(0x4060))
        );
        // DW_OP_reg3 (rbx); DW_OP_reg17 (xmm0) is no general-purpose register.
        assert_eq!(place_of(op(&[0x53]), true), Some(Place::Reg(3)));
        assert_eq!(op(&[0x61]), None);
        assert_eq!(op(&[0x9c]), Some(Single::CallFrameCfa));
        // DW_OP_breg7 (rsp) 8; DW_OP_addr then DW_OP_stack_value (a value, not storage);
        // DW_OP_addr cut short.
        assert_eq!(op(&[0x77, 0x08]), None);
        assert_eq!(op(&[0x03, 0x60, 0x40, 0, 0, 0, 0, 0, 0, 0x9f]), None);
        assert_eq!(op(&[0x03, 0x60, 0x40]), None);
        assert_eq!(op(&[]), None);
    }
}
