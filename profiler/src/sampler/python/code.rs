//! Python code objects read back from the process while it runs: qualified name, file, first
//! line, where their instructions start and their line table, which turns a frame's
//! instruction pointer into its line (the location table of CPython 3.11 and later,
//! `Objects/locations.md` in CPython's sources).

use crate::sampler::capture::memory::{read_process, read_u64};
use crate::sampler::python::layout::Layout;

/// The longest name or file read, in characters, and the longest line table, in bytes.
const MAX_STRING: u64 = 4096;
const MAX_TABLE: u64 = 1 << 20;

/// A code object, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CodeObject {
    /// `co_qualname`.
    pub name: String,
    /// `co_filename`.
    pub file: String,
    /// `co_firstlineno`.
    pub first_line: u32,
    /// Where its instructions start in the process (`co_code_adaptive`).
    pub instructions: u64,
    /// `co_linetable`.
    pub linetable: Vec<u8>,
    /// Where its `co_qualname` object was (a frame's record of its code object has it too).
    pub name_at: u64,
}

impl CodeObject {
    /// The Python function it is the code of, for the profile.
    pub(crate) fn function(&self) -> crate::format::db::PythonCode {
        crate::format::db::PythonCode {
            name: self.name.clone(),
            file: self.file.clone(),
            first_line: self.first_line,
        }
    }

    /// The line of a frame of this code whose instruction pointer is `instr` (bit 0 ignored:
    /// the frame reader's mark).
    pub(crate) fn line(&self, instr: u64) -> u32 {
        let index = (instr & !1).wrapping_sub(self.instructions) / 2;
        u32::try_from(index)
            .ok()
            .and_then(|i| line_of(&self.linetable, self.first_line, i))
            .unwrap_or(self.first_line)
    }
}

/// The code object at `at` in process `pid` (of version `layout`, whose `PyCode_Type` is at
/// `code_type`), if it is one and can be read.
pub(crate) fn read_code(pid: u32, layout: &Layout, code_type: u64, at: u64) -> Option<CodeObject> {
    if read_u64(pid, at + 8)? != code_type {
        return None;
    }
    let field = |offset: u32| read_u64(pid, at + u64::from(offset));
    let mut first = [0u8; 4];
    if !read_process(pid, at + u64::from(layout.code_first_line), &mut first) {
        return None;
    }
    let name_at = field(layout.code_qualname)?;
    Some(CodeObject {
        name: read_string(pid, layout, name_at)?,
        name_at,
        file: read_string(pid, layout, field(layout.code_filename)?)?,
        first_line: u32::try_from(i32::from_le_bytes(first)).unwrap_or(0),
        instructions: at + u64::from(layout.code_instructions),
        linetable: read_bytes(pid, field(layout.code_linetable)?)?,
    })
}

/// The `str` at `at`: a compact string (what names and file names are).
fn read_string(pid: u32, layout: &Layout, at: u64) -> Option<String> {
    let length = read_u64(pid, at + 16)?.min(MAX_STRING);
    let mut state = [0u8; 4];
    if !read_process(pid, at + 32, &mut state) {
        return None;
    }
    let state = u32::from_le_bytes(state);
    let (kind, compact, ascii) = ((state >> 2) & 7, state >> 5 & 1, state >> 6 & 1);
    if compact == 0 || !matches!(kind, 1 | 2 | 4) {
        return None;
    }
    let data = match ascii {
        1 => layout.ascii_data,
        _ => layout.compact_data,
    };
    let mut bytes = vec![0u8; (length * u64::from(kind)) as usize];
    if !read_process(pid, at + u64::from(data), &mut bytes) {
        return None;
    }
    let units = bytes.chunks_exact(kind as usize).map(|c| {
        let mut unit = [0u8; 4];
        unit[..c.len()].copy_from_slice(c);
        u32::from_le_bytes(unit)
    });
    Some(
        units
            .map(|u| char::from_u32(u).unwrap_or('\u{fffd}'))
            .collect(),
    )
}

/// The contents of the `bytes` at `at`.
fn read_bytes(pid: u32, at: u64) -> Option<Vec<u8>> {
    let size = read_u64(pid, at + 16)?;
    if size > MAX_TABLE {
        return None;
    }
    let mut bytes = vec![0u8; size as usize];
    read_process(pid, at + 32, &mut bytes).then_some(bytes)
}

/// The line of instruction `index` (in 2-byte code units) of code starting at `first_line`
/// whose location table is `table`; `None` where the instruction has no location (or line 0).
pub(crate) fn line_of(table: &[u8], first_line: u32, index: u32) -> Option<u32> {
    let mut bytes = table.iter().copied();
    let mut line = i64::from(first_line);
    let mut start = 0u32;
    while let Some(head) = bytes.next() {
        let code = (head >> 3) & 15;
        let units = u32::from(head & 7) + 1;
        let delta = match code {
            15 => None,
            14 => {
                let d = signed_varint(&mut bytes)?;
                for _ in 0..3 {
                    varint(&mut bytes)?;
                }
                Some(d)
            }
            13 => Some(signed_varint(&mut bytes)?),
            10..=12 => {
                bytes.next()?;
                bytes.next()?;
                Some(i64::from(code) - 10)
            }
            _ => {
                bytes.next()?;
                Some(0)
            }
        };
        if let Some(d) = delta {
            line += d;
        }
        if index < start + units {
            // Line 0: an instruction of no line (a module's first `RESUME`).
            return delta
                .and_then(|_| u32::try_from(line).ok())
                .filter(|&l| l > 0);
        }
        start += units;
    }
    None
}

/// A varint of the location table: 6 bits a byte, low first, bit 6 set on all but the last.
fn varint(bytes: &mut impl Iterator<Item = u8>) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(6) {
        let b = bytes.next()?;
        value |= u64::from(b & 63) << shift;
        if b & 64 == 0 {
            return Some(value);
        }
    }
    None
}

/// A signed varint: the sign in bit 0.
fn signed_varint(bytes: &mut impl Iterator<Item = u8>) -> Option<i64> {
    let v = varint(bytes)?;
    let magnitude = (v >> 1) as i64;
    Some(if v & 1 == 1 { -magnitude } else { magnitude })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_table_entries_of_each_form_move_the_line() {
        // Short form (line + 0, 2 units), one-line form (+1, 1 unit), no-column form (-1 as
        // signed varint 3, 2 units), long form (+40: varint 80 in two bytes, 1 unit), no
        // location (1 unit).
        let table = [
            0x80 | 0x01,
            0x00, // code 0, 2 units
            0x80 | (11 << 3),
            0x05,
            0x09, // code 11: +1, 1 unit
            0x80 | (13 << 3) | 0x01,
            0x03, // code 13: -1, 2 units
            0x80 | (14 << 3),
            0x40 | 16,
            0x01,
            0x00,
            0x01,
            0x01,             // code 14: +40 (80 = 16 + 1<<6), 1 unit
            0x80 | (15 << 3), // no location, 1 unit
        ];
        let line = |i| line_of(&table, 10, i);
        assert_eq!((line(0), line(1)), (Some(10), Some(10)));
        assert_eq!(line(2), Some(11));
        assert_eq!((line(3), line(4)), (Some(10), Some(10)));
        assert_eq!(line(5), Some(50));
        assert_eq!(line(6), None);
        assert_eq!(line(7), None);
    }

    #[test]
    fn the_line_of_a_frame_is_that_of_its_instruction_or_the_first_line() {
        let code = CodeObject {
            name: "f".into(),
            file: "f.py".into(),
            first_line: 3,
            instructions: 0x1000,
            linetable: vec![0x80 | (11 << 3), 0, 0, 0x80 | (12 << 3), 0, 0],
            name_at: 0,
        };
        assert_eq!(code.line(0x1000), 4);
        assert_eq!(code.line(0x1002 | 1), 6);
        assert_eq!(code.line(0x2000), 3);
    }
}
