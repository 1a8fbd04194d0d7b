//! A binary read in two parts: the DWARF sections the analysis reads, and the rest.
//!
//! The whole-module analysis reads the DWARF once, early, into structures of its own; what the
//! procedures' analyses read afterwards is code, data and symbols. Read into one buffer, the
//! debug sections (most of a binary built with `-g`: 25 of libpython's 31 MB) would stay in
//! memory to the end. Read apart, they are freed as soon as the DWARF is read.
//!
//! Each part is an image of the whole file, its bytes at their offsets and zero where the
//! other part's are: both parse as the same ELF file (the headers are in both), and pages
//! never read are never touched, so they cost no memory. Debug sections the caller does not
//! want (location lists, which the program structure never reads) are in neither part. Like
//! [`LoadedFile::open`], everything is read at once, so a binary rebuilt in place while it is
//! analysed never ends the process with SIGBUS.

use crate::binary::LoadedFile;
use crate::error::StructureError;
use crate::ranges::gaps;
use object::read::elf::{FileHeader, SectionHeader};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;

type Header = object::elf::FileHeader64<object::Endianness>;

/// File ranges.
type Ranges = Vec<Range<usize>>;

/// The DWARF part of a binary read by [`open`].
pub(crate) struct DebugPart {
    /// The image: the ELF headers and the wanted debug sections, zero elsewhere.
    pub(crate) image: LoadedFile,
    /// Where the debug sections' bytes are, sorted and disjoint (the headers, which both
    /// images hold, are not among them).
    ranges: Ranges,
}

/// Read `path` in two parts: everything but its debug sections, and the headers with the
/// debug sections whose names `wanted` accepts. A file that is not a plain little-endian ELF64
/// file, or whose section headers do not read, is read whole into the first part (its parse
/// then says what is wrong), with an empty debug part.
pub(crate) fn open(
    path: &Path,
    wanted: impl Fn(&str) -> bool,
) -> Result<(LoadedFile, DebugPart), StructureError> {
    let io_err = |source| StructureError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = crate::binary::open_binary(path)?;
    let size = file.metadata().map_err(io_err)?.len() as usize;
    // Zeroed by the kernel as it maps fresh pages: a page nothing is read into stays untouched.
    let mut rest = vec![0u8; size];
    let layout = Layout::read(&file, &mut rest, &wanted).map_err(io_err)?;
    let mut debug = vec![0u8; if layout.is_some() { size } else { 0 }];
    let (headers, mut debug_ranges, skipped) = match layout {
        Some(l) => (l.headers, l.debug, l.skipped),
        None => (Vec::new(), Vec::new(), Vec::new()),
    };
    for gap in complement(size, &[&headers, &debug_ranges, &skipped]) {
        read_at(&file, &mut rest[gap.clone()], gap.start as u64).map_err(io_err)?;
    }
    // A file without a build-id is known by the CRC-32 of all its bytes: all are read.
    if !skipped.is_empty() && !has_build_id(&rest) {
        debug_ranges = sorted(debug_ranges.into_iter().chain(skipped).collect());
    }
    for r in &headers {
        debug[r.clone()].copy_from_slice(&rest[r.clone()]);
    }
    for r in &debug_ranges {
        read_at(&file, &mut debug[r.clone()], r.start as u64).map_err(io_err)?;
    }
    let part = DebugPart {
        image: LoadedFile::from_bytes(path, debug),
        ranges: debug_ranges,
    };
    Ok((LoadedFile::from_bytes(path, rest), part))
}

impl DebugPart {
    /// The debug part parsed, or `None` where the file was read whole into the other part
    /// (which then holds the debug sections too).
    pub(crate) fn parse(&self) -> Result<Option<object::File<'_>>, StructureError> {
        if self.image.bytes().is_empty() {
            return Ok(None);
        }
        self.image.parse().map(Some)
    }

    /// The CRC-32 of the whole file ([`profiler::db::file_checksum`]) whose other part is
    /// `rest`. It is that of the file only where the file has no build-id (all its bytes are
    /// then read).
    pub(crate) fn file_checksum(&self, rest: &[u8]) -> u32 {
        let mut hasher = crc32fast::Hasher::new();
        let mut at = 0;
        for r in &self.ranges {
            hasher.update(&rest[at..r.start]);
            hasher.update(&self.image.bytes()[r.clone()]);
            at = r.end;
        }
        hasher.update(&rest[at..]);
        hasher.finalize()
    }
}

/// Whether the ELF file in `image` has a GNU build-id.
fn has_build_id(image: &[u8]) -> bool {
    use object::Object;
    object::File::parse(image).is_ok_and(|f| matches!(f.build_id(), Ok(Some(_))))
}

/// Where a file's parts lie, from its headers.
struct Layout {
    /// The ELF header, program headers, section headers and section names.
    headers: Ranges,
    /// The wanted debug sections.
    debug: Ranges,
    /// The debug sections not wanted, read into neither part.
    skipped: Ranges,
}

impl Layout {
    /// Read the headers of `file` into `image` (the size of the file) and lay out its parts;
    /// `None` where the file is to be read whole.
    fn read(
        file: &std::fs::File,
        image: &mut [u8],
        wanted: &dyn Fn(&str) -> bool,
    ) -> std::io::Result<Option<Layout>> {
        let size = image.len();
        let ehdr = 0..size.min(std::mem::size_of::<Header>());
        read_at(file, &mut image[ehdr.clone()], 0)?;
        let Some((phdrs, shdrs)) = header_tables(image) else {
            return Ok(None);
        };
        read_at(file, &mut image[phdrs.clone()], phdrs.start as u64)?;
        read_at(file, &mut image[shdrs.clone()], shdrs.start as u64)?;
        let Some(names) = names_range(image) else {
            return Ok(None);
        };
        read_at(file, &mut image[names.clone()], names.start as u64)?;
        let headers = sorted(vec![ehdr, phdrs, shdrs, names]);
        let Some((debug, skipped)) = debug_sections(image, wanted) else {
            return Ok(None);
        };
        // A debug section that shares bytes with the headers (a corrupt file) is read whole.
        let disjoint =
            |r: &Range<usize>| headers.iter().all(|h| h.end <= r.start || r.end <= h.start);
        if !debug.iter().chain(&skipped).all(disjoint) {
            return Ok(None);
        }
        Ok(Some(Layout {
            headers,
            debug,
            skipped,
        }))
    }
}

/// The file ranges of the program headers and of the section headers that the ELF header in
/// `image` names, if it is a little-endian ELF64 header whose tables lie inside the file.
fn header_tables(image: &[u8]) -> Option<(Range<usize>, Range<usize>)> {
    let header = Header::parse(image).ok()?;
    let endian = header.endian().ok()?;
    if endian != object::Endianness::Little {
        return None;
    }
    let table = |offset: u64, count: u16, entry: u16, expected: usize| {
        let start = usize::try_from(offset).ok()?;
        let len = usize::from(count).checked_mul(usize::from(entry))?;
        let range = start..start.checked_add(len)?;
        (usize::from(entry) == expected || count == 0).then_some(range)
    };
    let phdrs = table(
        header.e_phoff(endian),
        header.e_phnum(endian),
        header.e_phentsize(endian),
        std::mem::size_of::<object::elf::ProgramHeader64<object::Endianness>>(),
    )?;
    // Numbering past 65,535 sections (e_shnum 0) keeps the count in section 0: not read apart.
    let count = header.e_shnum(endian);
    let shdrs = table(
        header.e_shoff(endian),
        count,
        header.e_shentsize(endian),
        std::mem::size_of::<object::elf::SectionHeader64<object::Endianness>>(),
    )?;
    let inside = |r: &Range<usize>| r.end <= image.len();
    (count > 0 && inside(&phdrs) && inside(&shdrs)).then_some((phdrs, shdrs))
}

/// The file range of the section names, from the section headers read into `image`.
fn names_range(image: &[u8]) -> Option<Range<usize>> {
    let header = Header::parse(image).ok()?;
    let endian = header.endian().ok()?;
    let index = header.shstrndx(endian, image).ok()?;
    let section = header
        .section_headers(endian, image)
        .ok()?
        .get(index as usize)?;
    let (offset, size) = section.file_range(endian)?;
    file_range(offset, size, image.len())
}

/// The file ranges of the debug sections of the headers in `image`: those `wanted` accepts,
/// and the others; sorted. `None` if the sections do not parse.
fn debug_sections(image: &[u8], wanted: &dyn Fn(&str) -> bool) -> Option<(Ranges, Ranges)> {
    let header = Header::parse(image).ok()?;
    let endian = header.endian().ok()?;
    let sections = header.sections(endian, image).ok()?;
    let (mut debug, mut skipped) = (Vec::new(), Vec::new());
    for section in sections.iter() {
        let Ok(name) = sections.section_name(endian, section) else {
            continue;
        };
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        let Some((offset, size)) = section.file_range(endian) else {
            continue; // SHT_NOBITS: no bytes in the file
        };
        let Some(range) = file_range(offset, size, image.len()) else {
            continue; // past the end: the parse will say so
        };
        if wanted(name) {
            debug.push(range);
        } else if is_debug_section(name) && !range.is_empty() {
            skipped.push(range);
        }
    }
    let (debug, skipped) = (sorted(debug), sorted(skipped));
    let overlapping = |v: &[Range<usize>]| v.windows(2).any(|w| w[0].end > w[1].start);
    (!overlapping(&debug) && !overlapping(&skipped)).then_some((debug, skipped))
}

/// Whether a section of this name holds DWARF.
fn is_debug_section(name: &str) -> bool {
    name.starts_with(".debug_") || name.starts_with(".zdebug_")
}

/// `offset..offset + size` if inside a file of `len` bytes.
fn file_range(offset: u64, size: u64, len: usize) -> Option<Range<usize>> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(size).ok()?)?;
    (end <= len).then_some(start..end)
}

/// `ranges` without the empty ones, sorted.
fn sorted(mut ranges: Ranges) -> Ranges {
    ranges.retain(|r| !r.is_empty());
    ranges.sort_by_key(|r| (r.start, r.end));
    ranges
}

/// The parts of `0..size` that none of `taken` covers (the lists may overlap one another).
fn complement(size: usize, taken: &[&[Range<usize>]]) -> Ranges {
    let mut all: Ranges = taken.iter().flat_map(|t| t.iter().cloned()).collect();
    all.sort_by_key(|r| r.start);
    gaps(0..size, all.into_iter())
}

/// Fill `buf` from `file` at `offset`; a file that has shrunk since it was measured is an
/// error.
fn read_at(file: &std::fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    file.read_exact_at(buf, offset).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => {
            std::io::Error::other("the file shrank while it was read (rebuilt in place?)")
        }
        _ => e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small program built with DWARF, and with a build-id or without, in a new directory.
    fn program(build_id: bool) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("p.c");
        std::fs::write(&src, "int twice(int x) { return 2 * x; }\nint main(int c, char **v) { (void)v; return twice(c); }\n").unwrap();
        let exe = dir.path().join("p");
        let status = std::process::Command::new("gcc")
            .args(["-O1", "-g"])
            .arg(if build_id {
                "-Wl,--build-id"
            } else {
                "-Wl,--build-id=none"
            })
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .status()
            .unwrap();
        assert!(status.success());
        (dir, exe)
    }

    #[test]
    fn the_parts_together_are_the_file() {
        let (_dir, exe) = program(true);
        let whole = std::fs::read(&exe).unwrap();
        let (rest, debug) = open(&exe, |n| n.starts_with(".debug_")).unwrap();
        assert!(!debug.ranges.is_empty(), "the program has DWARF");
        let mut merged = rest.bytes().to_vec();
        for r in &debug.ranges {
            assert!(rest.bytes()[r.clone()].iter().all(|&b| b == 0));
            merged[r.clone()].copy_from_slice(&debug.image.bytes()[r.clone()]);
        }
        assert!(merged == whole, "each byte is in one part or the other");
        assert_eq!(debug.file_checksum(rest.bytes()), crc32fast::hash(&whole));
        // Both parse as the file, and each has its own sections' bytes.
        use object::{Object, ObjectSection};
        let (main, dwarf) = (rest.parse().unwrap(), debug.image.parse().unwrap());
        let data =
            |f: &object::File<'_>, name| f.section_by_name(name).unwrap().data().unwrap().to_vec();
        let text = data(&main, ".text");
        assert!(text.iter().any(|&b| b != 0));
        assert!(data(&dwarf, ".text").iter().all(|&b| b == 0));
        assert!(data(&dwarf, ".debug_info").iter().any(|&b| b != 0));
    }

    #[test]
    fn unwanted_debug_sections_are_in_neither_part() {
        let (_dir, exe) = program(true);
        let (rest, debug) = open(&exe, |n| n == ".debug_info").unwrap();
        use object::{Object, ObjectSection};
        let (main, dwarf) = (rest.parse().unwrap(), debug.image.parse().unwrap());
        let zero = |f: &object::File<'_>| {
            f.section_by_name(".debug_abbrev")
                .unwrap()
                .data()
                .unwrap()
                .iter()
                .all(|&b| b == 0)
        };
        assert!(zero(&main) && zero(&dwarf), "the program has a build-id");
    }

    #[test]
    fn without_a_build_id_every_byte_is_read_for_the_checksum() {
        let (_dir, exe) = program(false);
        let whole = std::fs::read(&exe).unwrap();
        let (rest, debug) = open(&exe, |n| n == ".debug_info").unwrap();
        assert_eq!(debug.file_checksum(rest.bytes()), crc32fast::hash(&whole));
    }

    #[test]
    fn a_file_that_is_not_elf_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notes.txt");
        std::fs::write(&path, b"not an ELF file at all, but text").unwrap();
        let (rest, debug) = open(&path, |_| true).unwrap();
        assert_eq!(rest.bytes(), b"not an ELF file at all, but text");
        assert!(debug.image.bytes().is_empty() && debug.ranges.is_empty());
        assert!(rest.parse().is_err());
        assert!(
            matches!(debug.parse(), Ok(None)),
            "the other part holds everything"
        );
    }

    #[test]
    fn a_binary_whose_layout_does_not_split_is_analysed_whole() {
        // `.debug_aranges` (never read) moved onto the ELF header: the parts cannot be told
        // apart, so the file is read whole, and analysed as if it had been read apart.
        let (dir, exe) = program(true);
        let mut bytes = std::fs::read(&exe).unwrap();
        let header = {
            use object::{Object, ObjectSection};
            let file = object::File::parse(&*bytes).unwrap();
            let index = file.section_by_name(".debug_aranges").unwrap().index().0;
            let shoff = u64::from_le_bytes(bytes[0x28..0x30].try_into().unwrap()) as usize;
            shoff + index * std::mem::size_of::<object::elf::SectionHeader64<object::Endianness>>()
        };
        bytes[header + 0x18..header + 0x20].copy_from_slice(&0u64.to_le_bytes());
        bytes[header + 0x20..header + 0x28].copy_from_slice(&16u64.to_le_bytes());
        let moved = dir.path().join("moved");
        std::fs::write(&moved, &bytes).unwrap();
        let (_, debug) = open(&moved, |n| n.starts_with(".debug_")).unwrap();
        assert!(matches!(debug.parse(), Ok(None)));
        let options = crate::Options::default();
        let whole = crate::analyze_file(&moved, &options).unwrap().tree;
        let split = crate::analyze_file(&exe, &options).unwrap().tree;
        let text = |tree: &crate::ScopeTree| {
            let mut out = Vec::new();
            crate::write_structure(&mut out, std::slice::from_ref(tree)).unwrap();
            String::from_utf8(out).unwrap().replace("moved", "p")
        };
        assert_eq!(text(&whole), text(&split));
        assert!(text(&whole).contains("n=\"twice\""));
    }

    #[test]
    fn gaps_between_taken_ranges() {
        let a = [0..4, 10..12];
        let b = [3..6, 11..13];
        assert_eq!(complement(15, &[&a, &b]), vec![6..10, 13..15]);
        assert_eq!(complement(4, &[&[0..2, 2..4]]), Vec::<Range<usize>>::new());
    }
}
