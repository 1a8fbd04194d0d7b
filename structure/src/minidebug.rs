//! MiniDebugInfo: the `.gnu_debugdata` section Fedora and its relatives leave in stripped
//! binaries and libraries, an xz-compressed ELF file holding the symbol table of the functions
//! that `.dynsym` does not name (gdb's "MiniDebugInfo"). Without it a stripped runtime
//! library's internal functions would be `<unknown procedure>`.

use crate::binary::MAX_COMPRESSION_RATIO;
use object::{Object, ObjectSection};
use std::io::Write;

/// The ELF file inside `file`'s `.gnu_debugdata`, decompressed, if it has one that
/// decompresses to at most `MAX_COMPRESSION_RATIO` times its size (more is a decompression bomb).
pub fn symbol_file(file: &object::File<'_>) -> Option<Vec<u8>> {
    let section = file.section_by_name(".gnu_debugdata")?;
    let packed = section.data().ok()?;
    let mut out = Bounded {
        bytes: Vec::new(),
        limit: (packed.len() as u64).saturating_mul(MAX_COMPRESSION_RATIO),
    };
    lzma_rs::xz_decompress(&mut std::io::Cursor::new(packed), &mut out).ok()?;
    Some(out.bytes)
}

/// A sink that refuses to grow past `limit` bytes.
struct Bounded {
    bytes: Vec<u8>,
    limit: u64,
}

impl Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() as u64 + buf.len() as u64 > self.limit {
            return Err(std::io::Error::other("decompresses to too much"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unbounded_stream_is_cut_at_its_limit() {
        let mut out = Bounded {
            bytes: Vec::new(),
            limit: 4,
        };
        assert!(out.write(b"abc").is_ok());
        assert!(out.write(b"de").is_err());
        assert_eq!(out.bytes, b"abc");
    }
}
