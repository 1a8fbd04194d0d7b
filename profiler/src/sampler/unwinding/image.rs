//! Load-module images: the ELF files (and the `[vdso]`) whose code the measured program runs.
//!
//! An image is read once (memory-mapped) and shared by every process that maps it. It knows its
//! build-id, its `PT_LOAD` segments (to turn a mapping's file offset into a link-time address)
//! and the sections framehop needs to unwind through it.

use std::fs::File;
use std::ops::{Deref, Range};
use std::path::Path;
use std::sync::Arc;

use framehop::ExplicitModuleSectionInfo;
use object::{Object, ObjectSection, ObjectSegment, SegmentFlags};

/// Bytes of one section of an image, shared without copying (framehop's `D` type).
#[derive(Clone)]
pub struct SectionBytes {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    range: Range<usize>,
}

impl SectionBytes {
    /// The bytes `range` of `owner`.
    pub(crate) fn new(owner: Arc<dyn AsRef<[u8]> + Send + Sync>, range: Range<usize>) -> Self {
        SectionBytes { owner, range }
    }
}

impl Deref for SectionBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &(*self.owner).as_ref()[self.range.clone()]
    }
}

/// A `PT_LOAD` segment: where a file range sits at link time.
#[derive(Debug, Clone, Copy)]
struct Segment {
    offset: u64,
    file_size: u64,
    vaddr: u64,
    /// Bytes at run time (more than `file_size` where `.bss` follows the file's bytes).
    mem_size: u64,
    executable: bool,
}

impl Segment {
    /// The file range the kernel maps for this segment: its bytes widened to whole pages.
    fn page_range(&self) -> Range<u64> {
        let end = self.offset.saturating_add(self.file_size.max(1));
        (self.offset & !PAGE_MASK)..end.saturating_add(PAGE_MASK) & !PAGE_MASK
    }
}

/// The low bits of an address within a 4 KiB page (mappings are page granular on x86-64).
const PAGE_MASK: u64 = 0xfff;

/// A section's link-time range and where its bytes are in the file.
#[derive(Debug, Clone)]
struct SectionLoc {
    svma: Range<u64>,
    file: Range<usize>,
}

/// One ELF image, ready to convert addresses and to unwind through.
pub struct Image {
    bytes: Arc<dyn AsRef<[u8]> + Send + Sync>,
    /// GNU build-id, if the file has one.
    pub build_id: Option<Vec<u8>>,
    /// The ELF entry point (link-time address), where a process's first instruction is when the
    /// image is the program or its dynamic loader.
    pub entry: Option<u64>,
    segments: Vec<Segment>,
    text: Option<SectionLoc>,
    eh_frame: Option<SectionLoc>,
    eh_frame_hdr: Option<SectionLoc>,
    got: Option<Range<u64>>,
}

/// Why an image could not be used (its addresses are then kept as file offsets).
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The file could not be opened or mapped.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The file is not an ELF object this profiler can read.
    #[error("not a readable ELF file: {0}")]
    Object(#[from] object::Error),
}

impl Image {
    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        (*self.bytes).as_ref()
    }

    /// [`crate::format::db::file_checksum`] of the image's bytes.
    pub fn checksum(&self) -> u32 {
        crate::format::db::file_checksum((*self.bytes).as_ref())
    }

    /// Map and parse the file at `path`.
    pub fn open(path: &Path) -> Result<Image, ImageError> {
        let file = File::open(path)?;
        // SAFETY: the mapping is read-only. Headers that claim more than the file holds are
        // harmless (object and `section` check every range against the mapping's length). Only
        // a file cut short while mapped could fault, and the measured program maps the same
        // file, so it would fault first; copying every module instead would double the
        // profiler's memory during the measurement. hpcstruct-rs and hpcprof-rs, which analyse
        // files that may be rebuilt meanwhile, read them instead.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        Image::parse(Arc::new(map))
    }

    /// Parse an image held in memory (the `[vdso]` copied from our own process).
    pub fn from_vec(bytes: Vec<u8>) -> Result<Image, ImageError> {
        Image::parse(Arc::new(bytes))
    }

    fn parse(bytes: Arc<dyn AsRef<[u8]> + Send + Sync>) -> Result<Image, ImageError> {
        let (build_id, entry, segments, text, eh_frame, eh_frame_hdr, got) = {
            let data: &[u8] = (*bytes).as_ref();
            let obj = object::File::parse(data)?;
            let segments = obj
                .segments()
                .map(|s| {
                    let (offset, file_size) = s.file_range();
                    let executable = matches!(
                        s.flags(),
                        SegmentFlags::Elf { p_flags, .. } if p_flags.0 & object::elf::PF_X.0 != 0
                    );
                    Segment {
                        offset,
                        file_size,
                        vaddr: s.address(),
                        mem_size: s.size(),
                        executable,
                    }
                })
                .collect();
            let loc = |name: &str| {
                let s = obj.section_by_name(name)?;
                let (off, size) = s.file_range()?;
                Some(SectionLoc {
                    svma: s.address()..s.address() + s.size(),
                    file: off as usize..(off + size) as usize,
                })
            };
            let got = obj
                .section_by_name(".got")
                .map(|s| s.address()..s.address() + s.size());
            (
                obj.build_id().ok().flatten().map(<[u8]>::to_vec),
                Some(obj.entry()).filter(|&e| e != 0),
                segments,
                loc(".text"),
                loc(".eh_frame"),
                loc(".eh_frame_hdr"),
                got,
            )
        };
        Ok(Image {
            bytes,
            build_id,
            entry,
            segments,
            text,
            eh_frame,
            eh_frame_hdr,
            got,
        })
    }

    /// The link-time address of the first byte of an executable mapping of `len` bytes that
    /// starts at file offset `file_offset` (page aligned).
    ///
    /// Segments share pages in the file: LLD, gold and mold lay them out back to back and shift
    /// each one's address instead, so the page where the code segment starts also belongs to the
    /// read-only segment before it. The segment is therefore the executable one whose mapped
    /// pages hold the whole mapping, falling back to weaker matches (a mapping cut short by
    /// `mprotect`, a non-executable segment mapped executable) only when none does.
    pub fn svma_of_mapping(&self, file_offset: u64, len: u64) -> Option<u64> {
        let mapping_end = file_offset.saturating_add(len);
        self.segments
            .iter()
            .filter(|s| s.page_range().contains(&file_offset))
            .max_by_key(|s| (s.executable, mapping_end <= s.page_range().end))
            .map(|s| s.vaddr.wrapping_add(file_offset).wrapping_sub(s.offset))
    }

    /// The link-time ranges of the image's data: every `PT_LOAD` segment that is not
    /// executable (`.rodata`, `.data`, `.bss`...), where its static variables live.
    pub fn data_segments(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.segments
            .iter()
            .filter(|s| !s.executable && s.mem_size > 0)
            .map(|s| s.vaddr..s.vaddr.saturating_add(s.mem_size))
    }

    fn section(&self, loc: &Option<SectionLoc>) -> Option<SectionBytes> {
        let loc = loc.as_ref()?;
        let len = (*self.bytes).as_ref().len();
        (loc.file.end <= len).then(|| SectionBytes {
            owner: self.bytes.clone(),
            range: loc.file.clone(),
        })
    }

    /// The bytes of the executable `PT_LOAD` segment holding link-time address `svma`, with the
    /// link-time address of their first byte: what the effective-address recovery (`data::ea`)
    /// decodes instructions from.
    pub(crate) fn code_at(&self, svma: u64) -> Option<(u64, &[u8])> {
        let data = (*self.bytes).as_ref();
        self.segments
            .iter()
            .filter(|s| s.executable)
            .find(|s| (s.vaddr..s.vaddr.saturating_add(s.file_size)).contains(&svma))
            .and_then(|s| {
                let start = usize::try_from(s.offset).ok()?;
                let end = start.checked_add(usize::try_from(s.file_size).ok()?)?;
                Some((s.vaddr, data.get(start..end)?))
            })
    }

    /// The image parsed again as an ELF object, for readers that need more than this type keeps
    /// (symbol tables, `.eh_frame` entries); `None` for a file that no longer parses.
    pub(crate) fn elf(&self) -> Option<object::File<'_>> {
        object::File::parse((*self.bytes).as_ref()).ok()
    }

    /// The section information framehop needs to unwind through this image.
    pub fn unwind_info(&self) -> ExplicitModuleSectionInfo<SectionBytes> {
        let svma = |loc: &Option<SectionLoc>| loc.as_ref().map(|l| l.svma.clone());
        ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: svma(&self.text),
            text: self.section(&self.text),
            got_svma: self.got.clone(),
            eh_frame_svma: svma(&self.eh_frame),
            eh_frame: self.section(&self.eh_frame),
            eh_frame_hdr_svma: svma(&self.eh_frame_hdr),
            eh_frame_hdr: self.section(&self.eh_frame_hdr),
            stubs_svma: None,
            stub_helper_svma: None,
            unwind_info: None,
            debug_frame: None,
            text_segment_svma: None,
            text_segment: None,
        }
    }
}
