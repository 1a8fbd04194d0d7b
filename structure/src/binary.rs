//! Opening an ELF binary: reading it into memory, finding its separate debug file, code bytes
//! and function symbols.

use crate::demangle::demangle;
use crate::error::StructureError;
use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};
use profiler::envelope::{open_regular, OpenError};
use rayon::prelude::*;
use std::borrow::Cow;
use std::path::{Path, PathBuf};

/// A file read whole into memory. It is read rather than mapped: a binary rebuilt in place
/// (`cp` over it, a linker writing into it) while it is analysed would otherwise end the
/// process with SIGBUS on the first touch of a page past its new end. The analysis reads
/// most of a binary anyway (code and debug sections), so the copy costs little more.
pub struct LoadedFile {
    /// Where it was found.
    pub path: PathBuf,
    bytes: Vec<u8>,
}

impl LoadedFile {
    /// Read `path` whole ([`open_binary`]).
    pub fn open(path: &Path) -> Result<LoadedFile, StructureError> {
        let io_err = |source| StructureError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = open_binary(path)?;
        // Sized from the start: grown by doubling, a large binary would be copied again and
        // again.
        let size = file.metadata().map_or(0, |m| m.len() as usize);
        let mut bytes = Vec::with_capacity(size + 1);
        std::io::Read::read_to_end(&mut file, &mut bytes).map_err(io_err)?;
        Ok(LoadedFile::from_bytes(path, bytes))
    }

    /// The file at `path` as read into `bytes`.
    pub(crate) fn from_bytes(path: &Path, bytes: Vec<u8>) -> LoadedFile {
        LoadedFile {
            path: path.to_path_buf(),
            bytes,
        }
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Parse as an x86-64 ELF file.
    pub fn parse(&self) -> Result<object::File<'_>, StructureError> {
        let not_elf = |message: String| StructureError::NotElf {
            path: self.path.clone(),
            message,
        };
        let file = object::File::parse(self.bytes()).map_err(|e| not_elf(e.to_string()))?;
        if file.format() != object::BinaryFormat::Elf {
            return Err(not_elf(format!("{:?} file, not ELF", file.format())));
        }
        if file.architecture() != object::Architecture::X86_64 {
            return Err(not_elf(format!(
                "architecture {:?}, only x86-64 is supported",
                file.architecture()
            )));
        }
        Ok(file)
    }
}

/// Open `path` for reading; anything but a regular file is refused (a directory would fail
/// obscurely, a FIFO block forever).
pub(crate) fn open_binary(path: &Path) -> Result<std::fs::File, StructureError> {
    let io_err = |source| StructureError::Io {
        path: path.to_path_buf(),
        source,
    };
    open_regular(path).map_err(|e| match e {
        OpenError::Io(source) => io_err(source),
        OpenError::NotAFile if path.is_dir() => io_err(std::io::Error::other("is a directory")),
        OpenError::NotAFile => io_err(std::io::Error::other("not a regular file")),
    })
}

/// Whether `file` carries DWARF (a `.debug_info` section with content).
pub fn has_dwarf(file: &object::File<'_>) -> bool {
    has_section(file, ".debug_info")
}

/// Whether `file` carries DWARF line tables (`.debug_info` or at least `.debug_line`): enough
/// for lines, and for inlined code inferred from the line map.
pub fn has_debug_lines(file: &object::File<'_>) -> bool {
    has_dwarf(file) || has_section(file, ".debug_line")
}

fn has_section(file: &object::File<'_>, name: &str) -> bool {
    file.section_by_name(name)
        .is_some_and(|s| s.size() > 0 && s.kind() != SectionKind::UninitializedData)
}

/// Whether an ELF file is a shared library (ET_DYN without an interpreter) rather than an
/// executable (PIE or not).
pub fn is_shared_library(file: &object::File<'_>) -> bool {
    file.kind() == object::ObjectKind::Dynamic && file.section_by_name(".interp").is_none()
}

/// Candidate separate debug files for `binary` ([`profiler::debugfiles::candidates`]: beside
/// it, in `.debug/`, under `/usr/lib/debug/<dir>`, by build-id, and `debuginfo` beside an
/// `executable` in a debuginfod cache layout such as a `--bundle` store).
pub fn debug_file_candidates(binary: &Path, file: &object::File<'_>) -> Vec<PathBuf> {
    let link = file.gnu_debuglink().ok().flatten().map(|(name, _crc)| name);
    let id = file.build_id().ok().flatten();
    profiler::debugfiles::candidates(binary, link, id)
}

/// The supplementary debug file that a file's DWARF refers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SupplementaryLink {
    /// Its path as the link states it (absolute, or relative to the linking file).
    pub path: PathBuf,
    /// Its build-id, when the link states one (`.gnu_debugaltlink` does).
    pub build_id: Option<Vec<u8>>,
}

/// The supplementary file named by `file`'s `.gnu_debugaltlink` (dwz) or `.debug_sup`
/// (DWARF 5), if any.
pub fn supplementary_link(file: &object::File<'_>) -> Option<SupplementaryLink> {
    use std::os::unix::ffi::OsStrExt;
    if let Ok(Some((name, id))) = file.gnu_debugaltlink() {
        return Some(SupplementaryLink {
            path: PathBuf::from(std::ffi::OsStr::from_bytes(name)),
            build_id: (!id.is_empty()).then(|| id.to_vec()),
        });
    }
    let sup = section_data(file, ".debug_sup").ok()?;
    let name = debug_sup_file_name(&sup)?;
    Some(SupplementaryLink {
        path: PathBuf::from(std::ffi::OsStr::from_bytes(name)),
        build_id: None,
    })
}

/// The file name in a `.debug_sup` section (version 5: `u16` version, `u8` is_supplementary,
/// then the name), unless the section describes the supplementary file itself.
fn debug_sup_file_name(section: &[u8]) -> Option<&[u8]> {
    let (&is_supplementary, rest) = section.get(2..)?.split_first()?;
    let end = rest.iter().position(|&b| b == 0)?;
    (is_supplementary == 0 && end > 0).then(|| &rest[..end])
}

/// Where the supplementary file `link` of the file at `linking` may be
/// ([`profiler::debugfiles::supplementary_candidates`]: the path it states, relative to
/// `linking`'s directory if relative, then by build-id).
pub fn supplementary_candidates(linking: &Path, link: &SupplementaryLink) -> Vec<PathBuf> {
    profiler::debugfiles::supplementary_candidates(linking, &link.path, link.build_id.as_deref())
}

/// How many times its compressed size a section may claim to decompress to. zlib cannot
/// exceed about 1032:1; debug information compresses 3:1 to 10:1. A claim above this is a
/// decompression bomb (a few kilobytes claiming gigabytes), not a section.
pub const MAX_COMPRESSION_RATIO: u64 = 2048;

/// The largest uncompressed size a compressed section may claim: 4 GiB, the most that 32-bit
/// DWARF offsets can address.
pub const MAX_UNCOMPRESSED_SIZE: u64 = 4 << 30;

/// The (uncompressed) bytes of section `name`, empty if absent. A compressed section that
/// claims an implausible size (over [`MAX_COMPRESSION_RATIO`] times its compressed size, or
/// over [`MAX_UNCOMPRESSED_SIZE`]) is not decompressed; that, and compressed data that does
/// not decompress, is an error saying what was skipped.
pub fn section_data<'d>(file: &object::File<'d>, name: &str) -> Result<Cow<'d, [u8]>, String> {
    let mut same_name = file.sections().filter(|s| s.name() == Ok(name));
    let Some(section) = same_name.next() else {
        return Ok(Cow::Borrowed(&[]));
    };
    let more: Vec<_> = same_name.collect();
    if more.is_empty() || !holds_units(name) {
        return one_section_data(&section, name);
    }
    // GCC's split DWARF with `-fdebug-types-section` puts each type unit in a `.debug_info.dwo`
    // section of its own, beside the one of the compilation unit: units delimit themselves,
    // so the sections read as one, in file order.
    let mut whole = one_section_data(&section, name)?.into_owned();
    for section in more {
        whole.extend_from_slice(&one_section_data(&section, name)?);
    }
    Ok(Cow::Owned(whole))
}

/// Whether a section of this name is a sequence of DWARF units (each with its length).
fn holds_units(name: &str) -> bool {
    let base = name.strip_suffix(".dwo").unwrap_or(name);
    base == ".debug_info" || base == ".debug_types"
}

/// The bytes of one section named `name` (decompressed; see [`section_data`]).
fn one_section_data<'d>(
    section: &object::Section<'d, '_>,
    name: &str,
) -> Result<Cow<'d, [u8]>, String> {
    let skipped = |why: String| format!("section {name}: {why}: skipped");
    let range = section
        .compressed_file_range()
        .map_err(|e| skipped(e.to_string()))?;
    if range.format != object::CompressionFormat::None {
        plausible_claim(range.compressed_size, range.uncompressed_size).map_err(skipped)?;
    }
    section
        .uncompressed_data()
        .map_err(|e| skipped(format!("compressed data unreadable ({e})")))
}

/// Whether `claimed` bytes are a plausible uncompressed size for `compressed` bytes; if not,
/// why not.
fn plausible_claim(compressed: u64, claimed: u64) -> Result<(), String> {
    let ratio_limit = compressed.saturating_mul(MAX_COMPRESSION_RATIO);
    if claimed > MAX_UNCOMPRESSED_SIZE || claimed > ratio_limit {
        return Err(format!(
            "{compressed} compressed bytes claim to decompress to {claimed} bytes (limits: \
             {MAX_COMPRESSION_RATIO} times the compressed size, {MAX_UNCOMPRESSED_SIZE} bytes)"
        ));
    }
    Ok(())
}

/// An executable section's bytes at their link-time address.
#[derive(Clone, Copy)]
pub struct CodeSection<'d> {
    /// Link-time address of the first byte.
    pub address: u64,
    /// The bytes.
    pub bytes: &'d [u8],
}

impl<'d> CodeSection<'d> {
    /// The bytes of `range`, if wholly inside this section.
    pub fn slice(&self, start: u64, end: u64) -> Option<&'d [u8]> {
        let lo = start.checked_sub(self.address)? as usize;
        let hi = end.checked_sub(self.address)? as usize;
        self.bytes.get(lo..hi)
    }

    /// Whether `addr` is inside this section.
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.address && addr - self.address < self.bytes.len() as u64
    }
}

/// The bytes of `sections` from `addr` to the end of the section holding it.
pub(crate) fn bytes_from<'d>(sections: &[CodeSection<'d>], addr: u64) -> Option<&'d [u8]> {
    let s = sections.iter().find(|s| s.contains(addr))?;
    s.slice(addr, s.address + s.bytes.len() as u64)
}

/// The executable sections of `file` with file contents, sorted by address.
pub fn code_sections<'d>(file: &object::File<'d>) -> Vec<CodeSection<'d>> {
    sections_where(file, |s| s.kind() == SectionKind::Text)
}

/// All allocated sections with file contents (code and data), sorted by address: what the
/// CFG builder may read jump tables from.
pub fn data_sections<'d>(file: &object::File<'d>) -> Vec<CodeSection<'d>> {
    sections_where(file, |s| {
        s.address() != 0 && s.kind() != SectionKind::UninitializedData
    })
}

/// The non-empty sections of `file` that `keep` accepts, sorted by address.
fn sections_where<'d>(
    file: &object::File<'d>,
    keep: impl Fn(&object::Section<'d, '_>) -> bool,
) -> Vec<CodeSection<'d>> {
    let mut out: Vec<CodeSection<'d>> = file
        .sections()
        .filter(|s| keep(s))
        .filter_map(|s| {
            let bytes = s.data().ok()?;
            (!bytes.is_empty()).then_some(CodeSection {
                address: s.address(),
                bytes,
            })
        })
        .collect();
    out.sort_by_key(|s| s.address);
    out
}

/// A function symbol.
#[derive(Clone, Debug)]
pub struct FunctionSymbol {
    /// Link-time address.
    pub address: u64,
    /// Size in bytes (0 when the symbol table does not say).
    pub size: u64,
    /// Link (mangled) name.
    pub link_name: String,
    /// Demangled name.
    pub name: String,
}

/// What `collect` keeps of the file's `.symtab`, else of its separate debug file's (stripped
/// binaries keep theirs there), else of its `.dynsym` with the symbols of its MiniDebugInfo
/// (`.gnu_debugdata`, [`mini_debuginfo`]): the first that gives anything.
pub(crate) fn symbols_with_fallback<T>(
    file: &object::File<'_>,
    debug: Option<&object::File<'_>>,
    collect: impl Fn(&mut dyn Iterator<Item = object::Symbol<'_, '_>>) -> Vec<T>,
) -> Vec<T> {
    let mut syms = collect(&mut file.symbols());
    if let (true, Some(debug)) = (syms.is_empty(), debug) {
        syms = collect(&mut debug.symbols());
    }
    if syms.is_empty() {
        syms = collect(&mut file.dynamic_symbols());
        let mini = mini_debuginfo(file);
        if let Some(mini) = mini.as_deref().and_then(|b| object::File::parse(b).ok()) {
            syms.extend(collect(&mut mini.symbols()));
        }
    }
    syms
}

/// Function symbols of `file` inside code sections, from its `.symtab`, else the `.symtab` of
/// its separate debug file `debug` (distributions strip the binary and keep the full table
/// there), else its `.dynsym`; sorted by address, one per address (global names preferred over
/// local ones). The untyped symbol at the ELF entry point (`_start` written in assembly, as in
/// the dynamic loader) counts as a function.
pub fn function_symbols(
    file: &object::File<'_>,
    debug: Option<&object::File<'_>>,
    code: &[CodeSection<'_>],
) -> Vec<FunctionSymbol> {
    let entry = file.entry();
    let collect = |iter: &mut dyn Iterator<Item = object::Symbol<'_, '_>>| {
        let mut syms: Vec<(bool, FunctionSymbol)> = Vec::new();
        for s in iter {
            let at_entry = s.kind() == SymbolKind::Unknown && s.address() == entry && entry != 0;
            if (s.kind() != SymbolKind::Text && !at_entry) || s.is_undefined() {
                continue;
            }
            let Ok(name) = s.name() else { continue };
            if name.is_empty() || !code.iter().any(|c| c.contains(s.address())) {
                continue;
            }
            syms.push((
                s.is_global(),
                FunctionSymbol {
                    address: s.address(),
                    size: s.size(),
                    link_name: name.to_string(),
                    // Demangled below, once per address and in parallel.
                    name: String::new(),
                },
            ));
        }
        syms
    };
    let mut syms = symbols_with_fallback(file, debug, collect);
    // The procedure linkage tables' stubs, which no symbol names (`malloc@plt`), in a binary
    // with symbols of its own (one without has nothing to analyse, stubs or not).
    if !syms.is_empty() {
        let stubs = crate::plt::stubs(file).into_iter();
        let stubs = stubs.filter(|(address, ..)| code.iter().any(|c| c.contains(*address)));
        syms.extend(stubs.map(|(address, size, link_name)| {
            let symbol = FunctionSymbol {
                address,
                size,
                link_name,
                name: String::new(),
            };
            (false, symbol)
        }));
    }
    // One symbol per address: the global one, then the one with a size, then the shortest name.
    syms.sort_by(|a, b| {
        a.1.address
            .cmp(&b.1.address)
            .then(b.0.cmp(&a.0))
            .then((b.1.size > 0).cmp(&(a.1.size > 0)))
            .then(a.1.link_name.len().cmp(&b.1.link_name.len()))
    });
    syms.dedup_by_key(|s| s.1.address);
    let mut syms: Vec<FunctionSymbol> = syms.into_iter().map(|(_, s)| s).collect();
    syms.par_iter_mut()
        .for_each(|s| s.name = demangled(&s.link_name));
    syms
}

/// A symbol's readable name: a procedure linkage table stub's as its function's, then `@plt`
/// (`std::_Rb_tree_decrement(std::_Rb_tree_node_base*)@plt`, as perf writes it).
fn demangled(link_name: &str) -> String {
    match link_name.strip_suffix("@plt") {
        Some(function) => format!("{}@plt", demangle(function)),
        None => demangle(link_name),
    }
}

/// MiniDebugInfo: the ELF file inside `file`'s `.gnu_debugdata` (the xz-compressed symbol
/// table of the functions `.dynsym` does not name, which Fedora and its relatives leave in
/// stripped binaries, gdb's "MiniDebugInfo"), decompressed, if it has one that
/// decompresses to at most `MAX_COMPRESSION_RATIO` times its size (more is a decompression bomb).
pub fn mini_debuginfo(file: &object::File<'_>) -> Option<Vec<u8>> {
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

impl std::io::Write for Bounded {
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
    fn debug_sup_names_the_supplementary_file() {
        assert_eq!(
            debug_sup_file_name(b"\x05\x00\x00common.sup\x00\x00"),
            Some(&b"common.sup"[..])
        );
        // The supplementary file's own section names no other file.
        assert_eq!(debug_sup_file_name(b"\x05\x00\x01\x00\x00"), None);
        assert_eq!(debug_sup_file_name(b"\x05"), None);
    }

    #[test]
    fn compression_claims_are_bounded() {
        assert!(plausible_claim(1000, 10_000).is_ok());
        assert!(plausible_claim(1000, 1000 * MAX_COMPRESSION_RATIO).is_ok());
        assert!(plausible_claim(1000, 1000 * MAX_COMPRESSION_RATIO + 1).is_err());
        assert!(plausible_claim(u64::MAX / 2, MAX_UNCOMPRESSED_SIZE + 1).is_err());
        assert!(plausible_claim(18_000, 4 << 30).is_err());
    }

    #[test]
    fn relative_supplementary_paths_are_beside_the_linking_file() {
        let link = SupplementaryLink {
            path: PathBuf::from("lib.so"),
            build_id: None,
        };
        // Only existing files are candidates: the binary of this test is one.
        let exe = std::env::current_exe().unwrap();
        let link = SupplementaryLink {
            path: PathBuf::from(exe.file_name().unwrap()),
            ..link
        };
        assert_eq!(supplementary_candidates(&exe, &link), vec![exe.clone()]);
    }

    #[test]
    fn a_file_cut_short_after_opening_reads_as_it_was_opened() {
        // A binary rebuilt in place (`cp`, a linker writing over it) while it is analysed: a
        // mapping of it would raise SIGBUS on the first touch of a page past the new end.
        let dir = std::env::temp_dir().join(format!("structure-truncated-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("copy");
        std::fs::copy(std::env::current_exe().unwrap(), &path).unwrap();
        let whole = std::fs::read(&path).unwrap();
        let opened = LoadedFile::open(&path).unwrap();
        std::fs::File::create(&path).unwrap(); // truncated to 0 bytes
        let same = opened.bytes() == whole.as_slice();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            same,
            "the bytes read are those of the file when it was opened"
        );
        assert!(opened.parse().is_ok());
    }

    #[test]
    fn an_unbounded_stream_is_cut_at_its_limit() {
        use std::io::Write;
        let mut out = Bounded {
            bytes: Vec::new(),
            limit: 4,
        };
        assert!(out.write(b"abc").is_ok());
        assert!(out.write(b"de").is_err());
        assert_eq!(out.bytes, b"abc");
    }
}
