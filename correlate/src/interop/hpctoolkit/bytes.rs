//! Little-endian byte layout for HPCToolkit's `*.db` files: a growing buffer that writes
//! aligned fields, NUL-terminated strings and pointers patched in later ([`Out`]), and a
//! bounds-checked view that reads them back and reports the first bad offset ([`In`]).

use super::HpctoolkitError;

/// A file being written: bytes so far, every field at the offset the caller chose.
#[derive(Default)]
pub(crate) struct Out {
    pub(crate) bytes: Vec<u8>,
}

impl Out {
    /// The offset the next byte will be written at.
    pub(crate) fn pos(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Pad with zeros to a multiple of `align`; returns the new offset.
    pub(crate) fn align(&mut self, align: u64) -> u64 {
        while !self.pos().is_multiple_of(align) {
            self.bytes.push(0);
        }
        self.pos()
    }

    /// Reserve `n` zero bytes (a structure filled in later); returns their offset.
    pub(crate) fn reserve(&mut self, n: usize) -> u64 {
        let at = self.pos();
        self.bytes.resize(self.bytes.len() + n, 0);
        at
    }

    /// Append raw bytes; returns their offset.
    pub(crate) fn put(&mut self, b: &[u8]) -> u64 {
        let at = self.pos();
        self.bytes.extend_from_slice(b);
        at
    }

    /// Append a NUL-terminated string; returns its offset.
    pub(crate) fn string(&mut self, s: &str) -> u64 {
        let at = self.put(s.as_bytes());
        self.bytes.push(0);
        at
    }

    /// Write `b` over the bytes at `at` (already reserved).
    pub(crate) fn set(&mut self, at: u64, b: &[u8]) {
        let at = at as usize;
        self.bytes[at..at + b.len()].copy_from_slice(b);
    }

    pub(crate) fn set_u8(&mut self, at: u64, v: u8) {
        self.set(at, &[v]);
    }

    pub(crate) fn set_u16(&mut self, at: u64, v: u16) {
        self.set(at, &v.to_le_bytes());
    }

    pub(crate) fn set_u32(&mut self, at: u64, v: u32) {
        self.set(at, &v.to_le_bytes());
    }

    pub(crate) fn set_u64(&mut self, at: u64, v: u64) {
        self.set(at, &v.to_le_bytes());
    }

    /// A file header: `HPCTOOLKIT`, the 4-byte format, version 4.`minor`, and room for
    /// `sections` (size, pointer) pairs; returns the offset of the first pair.
    pub(crate) fn header(&mut self, format: &[u8; 4], minor: u8, sections: usize) -> u64 {
        self.put(b"HPCTOOLKIT");
        self.put(format);
        self.put(&[4, minor]);
        self.reserve(16 * sections)
    }

    /// Fill section `i` of the header: it runs from `start` to the current end.
    pub(crate) fn section(&mut self, i: u64, start: u64) {
        let size = self.pos() - start;
        self.set_u64(0x10 + 16 * i, size);
        self.set_u64(0x18 + 16 * i, start);
    }
}

/// A file being read: every access is checked against its length.
#[derive(Clone, Copy)]
pub(crate) struct In<'a> {
    pub(crate) bytes: &'a [u8],
    /// The file's name in errors (`meta.db`, ...).
    pub(crate) name: &'static str,
}

impl<'a> In<'a> {
    /// The error for a structure that does not fit or makes no sense at `at`.
    pub(crate) fn bad(&self, at: u64, why: impl Into<String>) -> HpctoolkitError {
        HpctoolkitError::Corrupt {
            file: self.name.to_string(),
            at,
            why: why.into(),
        }
    }

    /// `n` bytes at `at`.
    pub(crate) fn slice(&self, at: u64, n: u64) -> Result<&'a [u8], HpctoolkitError> {
        let end = at.checked_add(n).filter(|&e| e <= self.bytes.len() as u64);
        match end {
            Some(end) => Ok(&self.bytes[at as usize..end as usize]),
            None => Err(self.bad(at, format!("{n} bytes past the end of the file"))),
        }
    }

    fn array<const N: usize>(&self, at: u64) -> Result<[u8; N], HpctoolkitError> {
        let mut out = [0; N];
        out.copy_from_slice(self.slice(at, N as u64)?);
        Ok(out)
    }

    pub(crate) fn u8(&self, at: u64) -> Result<u8, HpctoolkitError> {
        Ok(self.array::<1>(at)?[0])
    }

    pub(crate) fn u16(&self, at: u64) -> Result<u16, HpctoolkitError> {
        Ok(u16::from_le_bytes(self.array(at)?))
    }

    pub(crate) fn u32(&self, at: u64) -> Result<u32, HpctoolkitError> {
        Ok(u32::from_le_bytes(self.array(at)?))
    }

    pub(crate) fn u64(&self, at: u64) -> Result<u64, HpctoolkitError> {
        Ok(u64::from_le_bytes(self.array(at)?))
    }

    pub(crate) fn f64(&self, at: u64) -> Result<f64, HpctoolkitError> {
        Ok(f64::from_le_bytes(self.array(at)?))
    }

    /// The NUL-terminated UTF-8 string at `at`.
    pub(crate) fn string(&self, at: u64) -> Result<String, HpctoolkitError> {
        let rest = self.slice(at, 0).map(|_| &self.bytes[at as usize..])?;
        let len = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| self.bad(at, "string without its terminating NUL"))?;
        String::from_utf8(rest[..len].to_vec()).map_err(|_| self.bad(at, "string is not UTF-8"))
    }

    /// Check the header (`HPCTOOLKIT`, `format`, major version 4) and the 8-byte footer;
    /// returns the (size, pointer) of section `i` for each of the first `sections`.
    pub(crate) fn header(
        &self,
        format: &[u8; 4],
        footer: &[u8; 8],
        sections: usize,
    ) -> Result<Vec<(u64, u64)>, HpctoolkitError> {
        if self.slice(0, 14)? != [b"HPCTOOLKIT".as_slice(), format].concat() {
            return Err(self.bad(0, "not an HPCToolkit file of this kind (bad magic)"));
        }
        let major = self.u8(14)?;
        if major != 4 {
            return Err(self.bad(14, format!("major version {major}, only 4 is known")));
        }
        let len = self.bytes.len() as u64;
        if len < 8 || &self.bytes[len as usize - 8..] != footer {
            return Err(self.bad(len.saturating_sub(8), "missing footer (truncated?)"));
        }
        (0..sections as u64)
            .map(|i| {
                let (size, at) = (self.u64(0x10 + 16 * i)?, self.u64(0x18 + 16 * i)?);
                self.slice(at, size)?;
                Ok((size, at))
            })
            .collect()
    }
}
