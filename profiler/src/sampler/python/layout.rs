//! Where each CPython version keeps what the frame reader needs, and finding an interpreter in
//! a mapped module: its version (from the file's name), its `_PyRuntime` and its evaluator
//! (`_PyEval_EvalFrameDefault`).
//!
//! The offsets are those of CPython's own headers for x86-64 (checked against the debug
//! information of CPython 3.11.7, 3.12.1 and 3.13.0 with gdb: `&((PyThreadState*)0)->next`
//! and so on).

use std::ops::Range;

use object::{Object, ObjectSegment, ObjectSymbol};

/// The field offsets (bytes) of one CPython version.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// The minor version (3.`minor`).
    pub minor: u8,
    /// `_PyRuntimeState.interpreters.head`.
    interpreters_head: u32,
    /// `PyInterpreterState.threads.head`.
    threads_head: u32,
    /// `PyThreadState.next`.
    thread_next: u32,
    /// `PyThreadState.native_thread_id`.
    thread_id: u32,
    /// `PyThreadState.cframe` (3.11, 3.12) or `.current_frame` (3.13).
    thread_frame: u32,
    /// `_PyCFrame.current_frame` (3.11, 3.12).
    cframe_frame: Option<u32>,
    /// `_PyInterpreterFrame.f_code` (`f_executable` in 3.13).
    frame_code: u32,
    /// `_PyInterpreterFrame.previous`.
    frame_previous: u32,
    /// `_PyInterpreterFrame.prev_instr` (`instr_ptr` in 3.13).
    frame_instr: u32,
    /// `_PyInterpreterFrame.owner`.
    frame_owner: u32,
    /// `_PyInterpreterFrame.is_entry` (3.11).
    frame_entry: Option<u32>,
    /// `PyCodeObject.co_filename`.
    pub code_filename: u32,
    /// `PyCodeObject.co_qualname`.
    pub code_qualname: u32,
    /// `PyCodeObject.co_firstlineno` (an `int`).
    pub code_first_line: u32,
    /// `PyCodeObject.co_linetable` (a `bytes`).
    pub code_linetable: u32,
    /// `PyCodeObject.co_code_adaptive`: the instructions, which frames point into.
    pub code_instructions: u32,
    /// `sizeof(PyASCIIObject)`: where a compact ASCII string's characters start.
    pub ascii_data: u32,
    /// `sizeof(PyCompactUnicodeObject)`: where any other compact string's characters start.
    pub compact_data: u32,
}

/// CPython 3.11, 3.12 and 3.13.
static LAYOUTS: [Layout; 3] = [
    Layout {
        minor: 11,
        interpreters_head: 40,
        threads_head: 16,
        thread_next: 8,
        thread_id: 160,
        thread_frame: 56,
        cframe_frame: Some(8),
        frame_code: 32,
        frame_previous: 48,
        frame_instr: 56,
        frame_owner: 69,
        frame_entry: Some(68),
        code_filename: 112,
        code_qualname: 128,
        code_first_line: 72,
        code_linetable: 136,
        code_instructions: 184,
        ascii_data: 48,
        compact_data: 72,
    },
    Layout {
        minor: 12,
        interpreters_head: 40,
        threads_head: 72,
        thread_next: 8,
        thread_id: 144,
        thread_frame: 56,
        cframe_frame: Some(0),
        frame_code: 0,
        frame_previous: 8,
        frame_instr: 56,
        frame_owner: 70,
        frame_entry: None,
        code_filename: 112,
        code_qualname: 128,
        code_first_line: 68,
        code_linetable: 136,
        code_instructions: 192,
        ascii_data: 40,
        compact_data: 56,
    },
    Layout {
        minor: 13,
        interpreters_head: 632,
        threads_head: 7344,
        thread_next: 8,
        thread_id: 160,
        thread_frame: 72,
        cframe_frame: None,
        frame_code: 0,
        frame_previous: 8,
        frame_instr: 56,
        frame_owner: 70,
        frame_entry: None,
        code_filename: 112,
        code_qualname: 128,
        code_first_line: 68,
        code_linetable: 136,
        code_instructions: 200,
        ascii_data: 40,
        compact_data: 56,
    },
];

/// The size of the eBPF program's `struct config`.
pub(crate) const CONFIG_SIZE: usize = 56;

impl Layout {
    /// The eBPF program's `struct config` for an interpreter whose `_PyRuntime` is at `runtime`
    /// in the process.
    pub(crate) fn config(&self, runtime: u64) -> [u8; CONFIG_SIZE] {
        const NONE: u32 = u32::MAX;
        let mut c = [0u8; CONFIG_SIZE];
        let head = runtime + u64::from(self.interpreters_head);
        c[..8].copy_from_slice(&head.to_le_bytes());
        let fields = [
            self.threads_head,
            self.thread_next,
            self.thread_id,
            self.thread_frame,
            self.cframe_frame.unwrap_or(NONE),
            self.frame_code,
            self.frame_previous,
            self.frame_instr,
            self.frame_owner,
            self.frame_entry.unwrap_or(NONE),
            self.code_qualname,
            self.code_first_line,
        ];
        for (i, f) in fields.iter().enumerate() {
            c[8 + 4 * i..12 + 4 * i].copy_from_slice(&f.to_le_bytes());
        }
        c
    }
}

/// The CPython version a module file is the interpreter of, by its name (`python3.12`,
/// `libpython3.12.so.1.0`), where its layout is known: not a free-threaded or debug build
/// (`libpython3.13t.so`, `python3.12d`), whose structures differ.
pub(crate) fn layout_of(path: &str) -> Option<&'static Layout> {
    let name = path.rsplit('/').next()?;
    let rest = name
        .strip_prefix("libpython3.")
        .or_else(|| name.strip_prefix("python3."))?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let minor: u8 = digits.parse().ok()?;
    // A free-threaded (`3.13t`) or debug (`3.12d`) build lays its structures out otherwise.
    let abi = rest[digits.len()..].chars().next();
    if matches!(abi, Some('t' | 'd')) {
        return None;
    }
    LAYOUTS.iter().find(|l| l.minor == minor)
}

/// How to read one process's code objects.
#[derive(Debug, Clone)]
pub(crate) struct Reading {
    /// Its interpreter's version.
    pub layout: &'static Layout,
    /// Where its `PyCode_Type` is.
    pub code_type: u64,
    /// The processes it was forked from, nearest first: a code object it no longer has is the
    /// one at the same address in them, where that still matches the frame.
    pub ancestors: Vec<u32>,
}

/// A CPython interpreter in a module file, at link-time addresses.
#[derive(Debug)]
pub(crate) struct Interpreter {
    /// Its version's layout.
    pub layout: &'static Layout,
    /// `_PyRuntime`.
    pub runtime: u64,
    /// `_PyEval_EvalFrameDefault`.
    pub evaluator: Range<u64>,
    /// `PyCode_Type`: a code object's type.
    pub code_type: u64,
    /// The file's segments: (file offset, file size, link-time address).
    segments: Vec<(u64, u64, u64)>,
}

impl Interpreter {
    /// The interpreter in the file at `path`, if it is one of a known version and has both
    /// symbols.
    pub(crate) fn in_file(path: &str) -> Option<Interpreter> {
        let layout = layout_of(path)?;
        let file = std::fs::File::open(path).ok()?;
        // SAFETY: a read-only private mapping of a file we only read; a file changed under us
        // gives wrong symbols, never unsoundness beyond what reading it would.
        let data = unsafe { memmap2::Mmap::map(&file) }.ok()?;
        let file = object::File::parse(&*data).ok()?;
        let (mut runtime, mut evaluator, mut code_type) = (None, None, None);
        // The three are exported: the dynamic symbols first, the others only where needed.
        let mut symbols = file.dynamic_symbols().chain(file.symbols());
        while runtime.is_none() || evaluator.is_none() || code_type.is_none() {
            let Some(sym) = symbols.next() else { break };
            match sym.name() {
                Ok("_PyRuntime") => runtime = Some(sym.address()),
                Ok("PyCode_Type") => code_type = Some(sym.address()),
                Ok("_PyEval_EvalFrameDefault") if sym.size() > 0 => {
                    evaluator = Some(sym.address()..sym.address() + sym.size())
                }
                _ => {}
            }
        }
        let segments = (file.segments())
            .map(|seg| {
                let (offset, size) = seg.file_range();
                (offset, size, seg.address())
            })
            .collect();
        Some(Interpreter {
            layout,
            runtime: runtime?,
            evaluator: evaluator?,
            code_type: code_type?,
            segments,
        })
    }

    /// The frame reader's config for this interpreter loaded with bias `bias`.
    pub(crate) fn config(&self, bias: u64) -> [u8; CONFIG_SIZE] {
        self.layout.config(self.runtime.wrapping_add(bias))
    }

    /// How to read the code objects of this interpreter loaded with bias `bias`.
    pub(crate) fn reading(&self, bias: u64) -> Reading {
        Reading {
            layout: self.layout,
            code_type: self.code_type.wrapping_add(bias),
            ancestors: Vec::new(),
        }
    }

    /// The load bias of the file when mapped at `start` from file offset `pgoff`: what to add
    /// to its link-time addresses.
    pub(crate) fn bias(&self, start: u64, pgoff: u64) -> Option<u64> {
        (self.segments.iter()).find_map(|&(offset, size, address)| {
            (offset <= pgoff && pgoff < offset + size)
                .then(|| start.wrapping_sub(address + (pgoff - offset)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_the_interpreters_names() {
        assert_eq!(
            layout_of("/usr/lib/libpython3.12.so.1.0").map(|l| l.minor),
            Some(12)
        );
        assert_eq!(
            layout_of("/root/.pyenv/versions/3.11.7/bin/python3.11").map(|l| l.minor),
            Some(11)
        );
        assert_eq!(layout_of("/usr/bin/python3.13").map(|l| l.minor), Some(13));
        assert!(layout_of("/usr/bin/python3.10").is_none());
        assert!(layout_of("/usr/lib/libpythonista.so").is_none());
        assert!(layout_of("/usr/bin/python3").is_none());
        assert!(layout_of("/usr/lib/libpython3.13t.so.1.0").is_none());
        assert!(layout_of("/usr/bin/python3.12d").is_none());
    }

    #[test]
    fn the_config_holds_the_head_then_the_offsets_in_the_programs_order() {
        let l = layout_of("python3.11").unwrap();
        let c = l.config(0x1000);
        assert_eq!(u64::from_le_bytes(c[..8].try_into().unwrap()), 0x1000 + 40);
        let field = |i: usize| u32::from_le_bytes(c[8 + 4 * i..12 + 4 * i].try_into().unwrap());
        assert_eq!((field(0), field(3), field(4), field(9)), (16, 56, 8, 68));
        let c = layout_of("python3.13").unwrap().config(0);
        assert_eq!(u32::from_le_bytes(c[24..28].try_into().unwrap()), u32::MAX);
    }
}
