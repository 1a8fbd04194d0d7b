//! The fields of a `PERF_RECORD_SAMPLE` that precise memory events add, and what their data
//! source says.
//!
//! `linux-perf-event-reader` 0.10 walks a sample's fields but keeps neither the weight nor the
//! data source, and puts `PERF_SAMPLE_AUX` before the page sizes where the kernel writes it
//! after them. [`SampleLayout::fields`] walks the whole record itself, in the order of
//! `include/uapi/linux/perf_event.h` (and `perf_output_sample`): IDENTIFIER, IP, TID, TIME,
//! ADDR, ID, STREAM_ID, CPU, PERIOD, READ, CALLCHAIN, RAW, BRANCH_STACK, REGS_USER,
//! STACK_USER, WEIGHT or WEIGHT_STRUCT, DATA_SRC, TRANSACTION, REGS_INTR, PHYS_ADDR, CGROUP,
//! DATA_PAGE_SIZE, CODE_PAGE_SIZE, AUX, with the variable parts sized as the kernel sizes them:
//! `read_format` (group or single value; time enabled, time running, id, lost), the branch
//! stack's hardware index and counters, no registers after an ABI of 0, no `dyn_size` after an
//! empty stack copy.
//!
//! [`level_of`] reduces a `perf_mem_data_src` (operation, level and level number, remote,
//! snoop and extended snoop, hops) to the [`MemLevel`] a histogram counts.

use linux_perf_event_reader::RawData;
use perf_event_open_sys::bindings as sys;

use crate::format::dataref::MemLevel;
use crate::sampler::capture::pmu::MemOp;

/// How a sample's fields are laid out: the attribute's choices that size them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleLayout {
    sample_type: u64,
    read_format: u64,
    branch_sample_type: u64,
    regs_user: u32,
    regs_intr: u32,
}

/// The fields of one sample after the unwinding ones, where the layout has them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SampleFields {
    /// `PERF_SAMPLE_ADDR`: the data address.
    pub addr: Option<u64>,
    /// The access latency: `PERF_SAMPLE_WEIGHT`, or the first (32-bit) member of
    /// `PERF_SAMPLE_WEIGHT_STRUCT` (cycles on Intel and AMD; the instruction latency and retire
    /// latency in its other members are not kept).
    pub latency: Option<u64>,
    /// `PERF_SAMPLE_DATA_SRC`: a `perf_mem_data_src`.
    pub data_src: Option<u64>,
    /// `PERF_SAMPLE_TRANSACTION`.
    pub transaction: Option<u64>,
    /// `PERF_SAMPLE_PHYS_ADDR`.
    pub phys_addr: Option<u64>,
    /// `PERF_SAMPLE_DATA_PAGE_SIZE`.
    pub data_page_size: Option<u64>,
}

impl SampleLayout {
    /// The layout of the samples of an event opened with `attr`.
    pub fn of(attr: &sys::perf_event_attr) -> SampleLayout {
        SampleLayout {
            sample_type: attr.sample_type,
            read_format: attr.read_format,
            branch_sample_type: attr.branch_sample_type,
            regs_user: attr.sample_regs_user.count_ones(),
            regs_intr: attr.sample_regs_intr.count_ones(),
        }
    }

    fn has(&self, bit: u32) -> bool {
        self.sample_type & u64::from(bit) != 0
    }

    /// The fields of the sample record body `data` (after its 8-byte header); `None` when the
    /// record is shorter than its layout.
    pub fn fields(&self, mut data: RawData<'_>) -> Option<SampleFields> {
        type Le = byteorder::LittleEndian;
        let d = &mut data;
        let mut out = SampleFields::default();
        let skip = |d: &mut RawData<'_>, bit: u32, bytes: usize| -> Option<()> {
            if self.has(bit) {
                d.skip(bytes).ok()?;
            }
            Some(())
        };
        skip(d, sys::PERF_SAMPLE_IDENTIFIER, 8)?;
        skip(d, sys::PERF_SAMPLE_IP, 8)?;
        skip(d, sys::PERF_SAMPLE_TID, 8)?;
        skip(d, sys::PERF_SAMPLE_TIME, 8)?;
        if self.has(sys::PERF_SAMPLE_ADDR) {
            out.addr = Some(d.read_u64::<Le>().ok()?);
        }
        skip(d, sys::PERF_SAMPLE_ID, 8)?;
        skip(d, sys::PERF_SAMPLE_STREAM_ID, 8)?;
        skip(d, sys::PERF_SAMPLE_CPU, 8)?;
        skip(d, sys::PERF_SAMPLE_PERIOD, 8)?;
        if self.has(sys::PERF_SAMPLE_READ) {
            let f = |bit: u32| self.read_format & u64::from(bit) != 0;
            let per_value = 1 + f(sys::PERF_FORMAT_ID) as usize + f(sys::PERF_FORMAT_LOST) as usize;
            let times = f(sys::PERF_FORMAT_TOTAL_TIME_ENABLED) as usize
                + f(sys::PERF_FORMAT_TOTAL_TIME_RUNNING) as usize;
            let words = if f(sys::PERF_FORMAT_GROUP) {
                let nr = usize::try_from(d.read_u64::<Le>().ok()?).ok()?;
                times.checked_add(nr.checked_mul(per_value)?)?
            } else {
                per_value + times
            };
            d.skip(words.checked_mul(8)?).ok()?;
        }
        if self.has(sys::PERF_SAMPLE_CALLCHAIN) {
            let nr = usize::try_from(d.read_u64::<Le>().ok()?).ok()?;
            d.skip(nr.checked_mul(8)?).ok()?;
        }
        if self.has(sys::PERF_SAMPLE_RAW) {
            let size = d.read_u32::<Le>().ok()? as usize;
            d.skip(size).ok()?;
        }
        if self.has(sys::PERF_SAMPLE_BRANCH_STACK) {
            let nr = usize::try_from(d.read_u64::<Le>().ok()?).ok()?;
            let b = |bit: u32| self.branch_sample_type & u64::from(bit) != 0;
            if b(sys::PERF_SAMPLE_BRANCH_HW_INDEX) {
                d.skip(8).ok()?;
            }
            let per_entry = 3 + b(sys::PERF_SAMPLE_BRANCH_COUNTERS) as usize;
            d.skip(nr.checked_mul(per_entry * 8)?).ok()?;
        }
        if self.has(sys::PERF_SAMPLE_REGS_USER) && d.read_u64::<Le>().ok()? != 0 {
            d.skip(self.regs_user as usize * 8).ok()?;
        }
        if self.has(sys::PERF_SAMPLE_STACK_USER) {
            let size = usize::try_from(d.read_u64::<Le>().ok()?).ok()?;
            if size != 0 {
                d.skip(size.checked_add(8)?).ok()?; // the copy, then dyn_size
            }
        }
        if self.has(sys::PERF_SAMPLE_WEIGHT_STRUCT) {
            out.latency = Some(d.read_u64::<Le>().ok()? & 0xffff_ffff);
        } else if self.has(sys::PERF_SAMPLE_WEIGHT) {
            out.latency = Some(d.read_u64::<Le>().ok()?);
        }
        if self.has(sys::PERF_SAMPLE_DATA_SRC) {
            out.data_src = Some(d.read_u64::<Le>().ok()?);
        }
        if self.has(sys::PERF_SAMPLE_TRANSACTION) {
            out.transaction = Some(d.read_u64::<Le>().ok()?);
        }
        if self.has(sys::PERF_SAMPLE_REGS_INTR) && d.read_u64::<Le>().ok()? != 0 {
            d.skip(self.regs_intr as usize * 8).ok()?;
        }
        if self.has(sys::PERF_SAMPLE_PHYS_ADDR) {
            out.phys_addr = Some(d.read_u64::<Le>().ok()?);
        }
        skip(d, sys::PERF_SAMPLE_CGROUP, 8)?;
        if self.has(sys::PERF_SAMPLE_DATA_PAGE_SIZE) {
            out.data_page_size = Some(d.read_u64::<Le>().ok()?);
        }
        skip(d, sys::PERF_SAMPLE_CODE_PAGE_SIZE, 8)?;
        if self.has(sys::PERF_SAMPLE_AUX) {
            let size = usize::try_from(d.read_u64::<Le>().ok()?).ok()?;
            d.skip(size).ok()?;
        }
        Some(out)
    }
}

// The fields of `perf_mem_data_src` (include/uapi/linux/perf_event.h): shifts and values.
const OP_SHIFT: u32 = 0;
const OP_LOAD: u64 = 0x02;
const OP_STORE: u64 = 0x04;
const LVL_SHIFT: u32 = 5;
const LVL_HIT: u64 = 0x02;
const LVL_MISS: u64 = 0x04;
const LVL_L1: u64 = 0x08;
const LVL_LFB: u64 = 0x10;
const LVL_L2: u64 = 0x20;
const LVL_L3: u64 = 0x40;
const LVL_LOC_RAM: u64 = 0x80;
const LVL_REMOTE: u64 = 0x100 | 0x200 | 0x400 | 0x800; // REM_RAM1/2, REM_CCE1/2
const LVL_IO: u64 = 0x1000;
const LVL_UNC: u64 = 0x2000;
const SNOOP_SHIFT: u32 = 19;
const SNOOP_HITM: u64 = 0x10;
const LVLNUM_SHIFT: u32 = 33;
const REMOTE_SHIFT: u32 = 37;
const HOPS_SHIFT: u32 = 43;

fn field(v: u64, shift: u32, bits: u32) -> u64 {
    (v >> shift) & ((1 << bits) - 1)
}

/// Where the access a `perf_mem_data_src` describes was served from:
///
/// - a snoop that hit a modified line in another core's cache (`SNOOP_HITM`, perf c2c's HITM,
///   local or remote) is [`MemLevel::Hitm`] whatever the level;
/// - otherwise the level number (`mem_lvl_num`, the newer encoding) when it names one: `L0`,
///   `L1` → L1; `LFB` and `L2_MHB` (miss handling buffers) → fill buffer; `L2`; `L3`, `L4`, and
///   `ANY_CACHE` of this node → L3/LLC; `RAM`, `PMEM`, `CXL`, `MSC` → local DRAM; any of these
///   with `mem_remote` or two hops or more (another node or socket) → remote; `UNC`, `IO` →
///   uncached/IO;
/// - else the older `mem_lvl` bits: the level of a hit (`L1`, `LFB`, `L2`, `L3`, `LOC_RAM`,
///   `REM_*`, `IO`, `UNC`); a miss at a named level (Intel's stores report only "L1 miss") says
///   no more than where it was not, and is [`MemLevel::Unknown`], as is a source of 0 or N/A.
pub fn level_of(data_src: u64) -> MemLevel {
    let snoop = field(data_src, SNOOP_SHIFT, 5);
    if snoop & SNOOP_HITM != 0 {
        return MemLevel::Hitm;
    }
    let lvl = field(data_src, LVL_SHIFT, 14);
    let remote = field(data_src, REMOTE_SHIFT, 1) != 0 || field(data_src, HOPS_SHIFT, 3) >= 2;
    let local_or_remote = |local| if remote { MemLevel::Remote } else { local };
    let missed = lvl & LVL_MISS != 0 && lvl & LVL_HIT == 0;
    let by_number = match field(data_src, LVLNUM_SHIFT, 4) {
        0x01 | 0x07 => Some(MemLevel::L1),
        0x0c | 0x05 => Some(MemLevel::Lfb),
        0x02 => Some(MemLevel::L2),
        0x03 | 0x04 | 0x0b => Some(local_or_remote(MemLevel::L3)),
        0x0d | 0x0e | 0x09 | 0x06 => Some(local_or_remote(MemLevel::LocalDram)),
        0x08 | 0x0a => Some(MemLevel::Uncached),
        _ => None, // 0 (not filled in) and 0x0f (N/A)
    };
    if let Some(level) = by_number {
        return if missed { MemLevel::Unknown } else { level };
    }
    if missed {
        return MemLevel::Unknown;
    }
    // The deepest level named wins (a few encodings set several bits).
    if lvl & LVL_REMOTE != 0 {
        MemLevel::Remote
    } else if lvl & (LVL_IO | LVL_UNC) != 0 {
        MemLevel::Uncached
    } else if lvl & LVL_LOC_RAM != 0 {
        local_or_remote(MemLevel::LocalDram)
    } else if lvl & LVL_L3 != 0 {
        local_or_remote(MemLevel::L3)
    } else if lvl & LVL_L2 != 0 {
        MemLevel::L2
    } else if lvl & LVL_LFB != 0 {
        MemLevel::Lfb
    } else if lvl & LVL_L1 != 0 {
        MemLevel::L1
    } else {
        MemLevel::Unknown
    }
}

/// Whether a sample with this data source is one of the operations `keep` asks for: a load,
/// a store, or either ([`MemOp::Both`]: also a source that names no operation at all, but not
/// one that says it was none, as IBS says of the other operations it samples).
pub fn is_kept(data_src: u64, keep: MemOp) -> bool {
    let op = field(data_src, OP_SHIFT, 5);
    match keep {
        MemOp::Loads => op & OP_LOAD != 0,
        MemOp::Stores => op & OP_STORE != 0,
        MemOp::Both => op == 0 || op & (OP_LOAD | OP_STORE) != 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The encodings of perf_event.h's PERF_MEM_S(a, s).
    const fn s(value: u64, shift: u32) -> u64 {
        value << shift
    }
    const LOAD: u64 = s(OP_LOAD, OP_SHIFT);
    const STORE: u64 = s(OP_STORE, OP_SHIFT);
    const HIT: u64 = s(LVL_HIT, LVL_SHIFT);
    const MISS: u64 = s(LVL_MISS, LVL_SHIFT);
    const fn lvl(bits: u64) -> u64 {
        s(bits, LVL_SHIFT)
    }
    const fn lvlnum(n: u64) -> u64 {
        s(n, LVLNUM_SHIFT)
    }
    const SNOOP_NONE: u64 = s(0x02, SNOOP_SHIFT);
    const SNOOP_HIT: u64 = s(0x04, SNOOP_SHIFT);
    const HITM: u64 = s(SNOOP_HITM, SNOOP_SHIFT);
    const REMOTE: u64 = s(1, REMOTE_SHIFT);
    const TLB_HIT_L1: u64 = s(0x02 | 0x08, 26);

    #[test]
    fn data_sources_reduce_to_the_level_that_served_the_access() {
        let cases = [
            // Intel's older encoding (mem_lvl only).
            (
                LOAD | HIT | lvl(LVL_L1) | SNOOP_NONE | TLB_HIT_L1,
                MemLevel::L1,
            ),
            (LOAD | HIT | lvl(LVL_LFB), MemLevel::Lfb),
            (LOAD | HIT | lvl(LVL_L2) | SNOOP_NONE, MemLevel::L2),
            (LOAD | HIT | lvl(LVL_L3) | SNOOP_HIT, MemLevel::L3),
            (
                LOAD | HIT | lvl(LVL_LOC_RAM) | s(0x08, SNOOP_SHIFT),
                MemLevel::LocalDram,
            ),
            (LOAD | HIT | lvl(0x100), MemLevel::Remote), // REM_RAM1
            (LOAD | HIT | lvl(0x400), MemLevel::Remote), // REM_CCE1
            (LOAD | HIT | lvl(LVL_UNC), MemLevel::Uncached),
            (LOAD | HIT | lvl(LVL_IO), MemLevel::Uncached),
            // HITM: local (L3) and remote (REM_CCE1, or the number encoding).
            (LOAD | HIT | lvl(LVL_L3) | HITM, MemLevel::Hitm),
            (LOAD | HIT | lvl(0x400) | HITM, MemLevel::Hitm),
            (
                LOAD | HIT | lvl(LVL_L3) | lvlnum(0x03) | HITM,
                MemLevel::Hitm,
            ),
            (LOAD | HIT | lvlnum(0x0b) | REMOTE | HITM, MemLevel::Hitm),
            // The level-number encoding (Intel since Ice Lake's kernels, AMD IBS).
            (LOAD | HIT | lvlnum(0x01), MemLevel::L1),
            (LOAD | HIT | lvlnum(0x0c), MemLevel::Lfb),
            (LOAD | HIT | lvlnum(0x02), MemLevel::L2),
            (LOAD | HIT | lvlnum(0x03) | SNOOP_HIT, MemLevel::L3),
            (LOAD | HIT | lvlnum(0x0d), MemLevel::LocalDram),
            (LOAD | HIT | lvlnum(0x0d) | REMOTE, MemLevel::Remote),
            (
                LOAD | HIT | lvlnum(0x0b) | s(2, HOPS_SHIFT),
                MemLevel::Remote,
            ), // another node
            (LOAD | HIT | lvlnum(0x0b) | s(1, HOPS_SHIFT), MemLevel::L3), // another core's
            (LOAD | HIT | lvlnum(0x09), MemLevel::LocalDram),             // CXL
            (LOAD | HIT | lvlnum(0x0a), MemLevel::Uncached),              // IO
            // Nothing known.
            (0, MemLevel::Unknown),
            (
                s(0x01, OP_SHIFT) | lvl(0x01) | lvlnum(0x0f),
                MemLevel::Unknown,
            ), // all N/A
            // Intel stores: L1 hit, or L1 miss (served from somewhere else).
            (STORE | HIT | lvl(LVL_L1), MemLevel::L1),
            (STORE | MISS | lvl(LVL_L1), MemLevel::Unknown),
            (STORE | MISS | lvl(LVL_L1) | lvlnum(0x01), MemLevel::Unknown),
        ];
        for (src, level) in cases {
            assert_eq!(level_of(src), level, "data_src {src:#x}");
        }
    }

    #[test]
    fn operations_are_kept_by_kind() {
        let load = LOAD | HIT | lvl(LVL_L1);
        let store = STORE | HIT | lvl(LVL_L1);
        assert!(is_kept(load, MemOp::Loads) && !is_kept(load, MemOp::Stores));
        assert!(is_kept(store, MemOp::Stores) && !is_kept(store, MemOp::Loads));
        assert!(is_kept(load, MemOp::Both) && is_kept(0, MemOp::Both));
        let not_memory = s(0x01, OP_SHIFT) | lvl(0x01); // OP_NA, LVL_NA
        assert!(!is_kept(not_memory, MemOp::Both) && !is_kept(not_memory, MemOp::Loads));
    }

    /// A sample laid out for `sample_type` (and the other attribute fields given), built field by
    /// field in the kernel's order.
    struct Builder {
        attr: sys::perf_event_attr,
        bytes: Vec<u8>,
    }

    impl Builder {
        fn new(sample_type: u32) -> Builder {
            let attr = sys::perf_event_attr {
                sample_type: u64::from(sample_type),
                ..Default::default()
            };
            Builder {
                attr,
                bytes: Vec::new(),
            }
        }
        fn u64s(mut self, values: &[u64]) -> Builder {
            for v in values {
                self.bytes.extend_from_slice(&v.to_le_bytes());
            }
            self
        }
        fn raw(mut self, data: &[u8]) -> Builder {
            self.bytes.extend_from_slice(data);
            self
        }
        fn fields(&self) -> Option<SampleFields> {
            SampleLayout::of(&self.attr).fields(RawData::Single(&self.bytes))
        }
    }

    const ADDR: u64 = 0x7f12_3456_7890;
    const SRC: u64 = LOAD | HIT | lvlnum(0x03) | lvl(LVL_L3) | HITM;

    #[test]
    fn the_fields_after_the_stack_copy_are_found_with_and_without_one() {
        // hpcrun-rs's precise memory layout: IDENTIFIER IP TID TIME ADDR CPU PERIOD REGS_USER
        // STACK_USER WEIGHT_STRUCT DATA_SRC.
        let st = sys::PERF_SAMPLE_IDENTIFIER
            | sys::PERF_SAMPLE_IP
            | sys::PERF_SAMPLE_TID
            | sys::PERF_SAMPLE_TIME
            | sys::PERF_SAMPLE_ADDR
            | sys::PERF_SAMPLE_CPU
            | sys::PERF_SAMPLE_PERIOD
            | sys::PERF_SAMPLE_REGS_USER
            | sys::PERF_SAMPLE_STACK_USER
            | sys::PERF_SAMPLE_WEIGHT_STRUCT
            | sys::PERF_SAMPLE_DATA_SRC;
        // Weight struct: var1_dw = 187 cycles, var2_w = 40, var3_w = 7.
        let weight = 187 | 40 << 32 | 7 << 48;
        let header = [7, 0x40_1000, 0x0000_0002_0000_0001, 5_000, ADDR, 1, 1000];
        let mut b = Builder::new(st).u64s(&header);
        b.attr.sample_regs_user = 0x1c0; // BP SP IP
        b = b.u64s(&[2, 0x7ffc_0000, 0x7ffc_0100, 0x40_1000]); // ABI 64, three registers
        b = b.u64s(&[64]).raw(&[0xaa; 64]).u64s(&[48]); // stack copy, dyn_size
        let b = b.u64s(&[weight, SRC]);
        let f = b.fields().unwrap();
        assert_eq!(
            (f.addr, f.latency, f.data_src),
            (Some(ADDR), Some(187), Some(SRC))
        );
        assert_eq!(level_of(f.data_src.unwrap()), MemLevel::Hitm);
        // A truncated record is refused, not misread.
        let short = Builder {
            bytes: b.bytes[..b.bytes.len() - 4].to_vec(),
            attr: b.attr,
        };
        assert_eq!(short.fields(), None);

        // Registers absent (ABI 0: a kernel thread) and an empty stack copy (no dyn_size).
        let mut b = Builder::new(st).u64s(&header);
        b.attr.sample_regs_user = 0x1c0;
        let b = b.u64s(&[0]).u64s(&[0]).u64s(&[weight, SRC]);
        let f = b.fields().unwrap();
        assert_eq!(
            (f.addr, f.latency, f.data_src),
            (Some(ADDR), Some(187), Some(SRC))
        );

        // Neither REGS_USER nor STACK_USER asked for; a plain WEIGHT is taken whole.
        let st2 = (st
            & !(sys::PERF_SAMPLE_REGS_USER
                | sys::PERF_SAMPLE_STACK_USER
                | sys::PERF_SAMPLE_WEIGHT_STRUCT))
            | sys::PERF_SAMPLE_WEIGHT;
        let b = Builder::new(st2).u64s(&header).u64s(&[0x1_0000_0123, SRC]);
        let f = b.fields().unwrap();
        assert_eq!(
            (f.addr, f.latency, f.data_src),
            (Some(ADDR), Some(0x1_0000_0123), Some(SRC))
        );
    }

    #[test]
    fn every_variable_part_before_the_weight_is_sized_as_the_kernel_writes_it() {
        let st = sys::PERF_SAMPLE_TID
            | sys::PERF_SAMPLE_ADDR
            | sys::PERF_SAMPLE_ID
            | sys::PERF_SAMPLE_STREAM_ID
            | sys::PERF_SAMPLE_READ
            | sys::PERF_SAMPLE_CALLCHAIN
            | sys::PERF_SAMPLE_RAW
            | sys::PERF_SAMPLE_BRANCH_STACK
            | sys::PERF_SAMPLE_REGS_USER
            | sys::PERF_SAMPLE_STACK_USER
            | sys::PERF_SAMPLE_WEIGHT
            | sys::PERF_SAMPLE_DATA_SRC
            | sys::PERF_SAMPLE_TRANSACTION
            | sys::PERF_SAMPLE_REGS_INTR
            | sys::PERF_SAMPLE_PHYS_ADDR
            | sys::PERF_SAMPLE_CGROUP
            | sys::PERF_SAMPLE_DATA_PAGE_SIZE
            | sys::PERF_SAMPLE_CODE_PAGE_SIZE
            | sys::PERF_SAMPLE_AUX;
        let mut b = Builder::new(st);
        b.attr.read_format = u64::from(
            sys::PERF_FORMAT_GROUP
                | sys::PERF_FORMAT_ID
                | sys::PERF_FORMAT_TOTAL_TIME_ENABLED
                | sys::PERF_FORMAT_LOST,
        );
        b.attr.branch_sample_type =
            u64::from(sys::PERF_SAMPLE_BRANCH_HW_INDEX | sys::PERF_SAMPLE_BRANCH_COUNTERS);
        b.attr.sample_regs_user = 0x3; // AX BX
        b.attr.sample_regs_intr = 0x7; // AX BX CX
        let b = b
            .u64s(&[1 << 32 | 1, ADDR, 11, 12]) // TID, ADDR, ID, STREAM_ID
            .u64s(&[2, 100, 1, 2, 3, 4, 5, 6]) // READ: nr 2, enabled, 2 x {value id lost}
            .u64s(&[3, 0xa, 0xb, 0xc]) // CALLCHAIN
            .raw(&12u32.to_le_bytes())
            .raw(&[0xee; 12]) // RAW: size 12 (4 + 12 = 16, 8-aligned)
            .u64s(&[2, 9]) // BRANCH_STACK: nr 2, hw_idx
            .u64s(&[1, 2, 3, 4, 5, 6, 7, 8]) // 2 x {from to flags counters}
            .u64s(&[2, 0x11, 0x22]) // REGS_USER
            .u64s(&[16])
            .raw(&[0; 16])
            .u64s(&[16]) // STACK_USER
            .u64s(&[250, SRC, 0x5]) // WEIGHT, DATA_SRC, TRANSACTION
            .u64s(&[2, 1, 2, 3]) // REGS_INTR
            .u64s(&[0x1234_5000, 77, 4096, 8192]) // PHYS_ADDR, CGROUP, page sizes
            .u64s(&[8, 0]); // AUX: 8 bytes
        let f = b.fields().unwrap();
        assert_eq!(
            f,
            SampleFields {
                addr: Some(ADDR),
                latency: Some(250),
                data_src: Some(SRC),
                transaction: Some(5),
                phys_addr: Some(0x1234_5000),
                data_page_size: Some(4096),
            }
        );
        // The same with a single-value read_format (value, enabled, id, lost).
        let mut single = Builder {
            attr: b.attr,
            bytes: Vec::new(),
        };
        single.attr.read_format &= !u64::from(sys::PERF_FORMAT_GROUP);
        let mut bytes = b.bytes.clone();
        // Replace the group read (8 words) by a single one (4 words).
        let read_at = 4 * 8;
        bytes.splice(
            read_at..read_at + 8 * 8,
            [1u64, 100, 11, 0].iter().flat_map(|v| v.to_le_bytes()),
        );
        single.bytes = bytes;
        assert_eq!(single.fields(), Some(f));
    }
}
