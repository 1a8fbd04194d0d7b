//! Landing pads: where control goes when a call throws (C++ `catch` blocks and cleanups, Rust
//! drops during unwinding).
//!
//! Nothing in the machine code jumps to a landing pad; the unwinder does, following the
//! function's language-specific data area (LSDA, in `.gcc_except_table`), which `.eh_frame`
//! names for each function. The LSDA's call-site table says, for each range of call
//! instructions, which landing pad catches an exception thrown from them. Loop recovery adds an
//! edge from each such call to its landing pad, so a `catch` inside a loop is part of the loop.

use crate::cfg::LandingPad;
use fxhash::FxHashMap;
use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, Pointer, UnwindSection};
use object::{Object, ObjectSection};

/// `DW_EH_PE_omit`: no value follows.
const OMIT: u8 = 0xff;

/// The LSDA address of each function (by its `.eh_frame` start address) of a module.
#[derive(Default)]
pub(crate) struct ExceptionTables {
    lsda_of: FxHashMap<u64, u64>,
}

impl ExceptionTables {
    /// Read `.eh_frame` of `file`: which functions have an LSDA. Empty when there is none or it
    /// cannot be read (the loops are then found without exception edges).
    pub(crate) fn read(file: &object::File<'_>) -> Self {
        let mut lsda_of = FxHashMap::default();
        let Some(section) = file.section_by_name(".eh_frame") else {
            return ExceptionTables::default();
        };
        let Ok(data) = section.data() else {
            return ExceptionTables::default();
        };
        let eh_frame = EhFrame::new(data, LittleEndian);
        let mut bases = BaseAddresses::default().set_eh_frame(section.address());
        if let Some(text) = file.section_by_name(".text") {
            bases = bases.set_text(text.address());
        }
        if let Some(got) = file.section_by_name(".got") {
            bases = bases.set_got(got.address());
        }
        let mut entries = eh_frame.entries(&bases);
        while let Ok(Some(entry)) = entries.next() {
            let CieOrFde::Fde(partial) = entry else {
                continue;
            };
            let Ok(fde) = partial.parse(|s, b, o| s.cie_from_offset(b, o)) else {
                continue;
            };
            if let Some(Pointer::Direct(lsda)) = fde.lsda() {
                lsda_of.insert(fde.initial_address(), lsda);
            }
        }
        ExceptionTables { lsda_of }
    }

    /// The landing pads of the function whose code starts at `start`, read from its LSDA
    /// through `read_from` (the bytes of the module from an address to the end of its section).
    /// Empty if it has none or the table is malformed.
    pub(crate) fn pads<'a>(
        &self,
        start: u64,
        read_from: impl Fn(u64) -> Option<&'a [u8]>,
    ) -> Vec<LandingPad> {
        self.lsda_of
            .get(&start)
            .and_then(|&lsda| read_from(lsda))
            .and_then(|bytes| call_sites(bytes, start))
            .unwrap_or_default()
    }
}

/// Parse an LSDA's header and call-site table (see the Itanium C++ ABI's exception handling
/// tables, as GCC and LLVM write them) for the function starting at `function`.
fn call_sites(bytes: &[u8], function: u64) -> Option<Vec<LandingPad>> {
    let mut r = Reader { bytes, at: 0 };
    let lp_encoding = r.u8()?;
    let lp_start = if lp_encoding == OMIT {
        function
    } else {
        r.encoded(lp_encoding)?
    };
    if r.u8()? != OMIT {
        r.uleb()?; // offset of the type table: not needed
    }
    let encoding = r.u8()?;
    let length = usize::try_from(r.uleb()?).ok()?;
    let end = r.at.checked_add(length)?;
    let mut out = Vec::new();
    while r.at < end {
        let start = r.encoded(encoding)?;
        let len = r.encoded(encoding)?;
        let pad = r.encoded(encoding)?;
        r.uleb()?; // action
        if pad != 0 {
            out.push(LandingPad {
                start: function.checked_add(start)?,
                end: function.checked_add(start)?.checked_add(len)?,
                pad: lp_start.checked_add(pad)?,
            });
        }
    }
    Some(out)
}

/// A cursor over LSDA bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let b = self.bytes.get(self.at..self.at.checked_add(N)?)?;
        self.at += N;
        b.try_into().ok()
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take::<1>()?[0])
    }

    fn uleb(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    /// A value in one of the `DW_EH_PE_*` formats call-site tables use (no relative bases:
    /// call-site values are offsets by definition).
    fn encoded(&mut self, encoding: u8) -> Option<u64> {
        match encoding & 0x0f {
            0x01 => self.uleb(),
            0x02 => Some(u64::from(u16::from_le_bytes(self.take()?))),
            0x03 => Some(u64::from(u32::from_le_bytes(self.take()?))),
            0x04 => Some(u64::from_le_bytes(self.take()?)),
            0x0b => Some(i64::from(i32::from_le_bytes(self.take()?)) as u64),
            0x0c => Some(u64::from_le_bytes(self.take()?)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_site_tables_in_uleb_and_udata4() {
        // lpstart omitted, no type table, uleb128 call sites: [0x10, +0x5) lands at 0x40,
        // [0x20, +0x4) has no pad.
        let uleb = [
            0xff, 0xff, 0x01, 8, 0x10, 0x05, 0x40, 0x00, 0x20, 0x04, 0x00, 0x00,
        ];
        assert_eq!(
            call_sites(&uleb, 0x1000),
            Some(vec![LandingPad {
                start: 0x1010,
                end: 0x1015,
                pad: 0x1040
            }])
        );
        // A type table offset, then udata4 entries.
        let mut udata4 = vec![0xff, 0x9b, 0x05, 0x03, 13];
        for v in [0x8u32, 0x6, 0x30] {
            udata4.extend_from_slice(&v.to_le_bytes());
        }
        udata4.push(0x01);
        assert_eq!(
            call_sites(&udata4, 0x2000),
            Some(vec![LandingPad {
                start: 0x2008,
                end: 0x200e,
                pad: 0x2030
            }])
        );
        // Cut short: no table, no panic.
        assert_eq!(call_sites(&udata4[..9], 0x2000), None);
    }
}
