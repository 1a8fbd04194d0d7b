//! Instruction boundaries and basic blocks: where functions are in a module (symbol tables and
//! `.eh_frame`), and each sampled function decoded once from its entry.

use std::ops::Range;

use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, OpKind};

/// The longest function decoded (bytes); a longer range is more likely a wrong size than code.
const MAX_FUNCTION_BYTES: u64 = 1 << 20;

/// The link-time ranges of one module's functions, sorted by start.
pub(super) struct FunctionMap {
    ranges: Vec<Range<u64>>,
}

impl FunctionMap {
    /// The map of `ranges` (any order, duplicates and empty ranges allowed).
    pub(super) fn new(mut ranges: Vec<Range<u64>>) -> Self {
        ranges.retain(|r| !r.is_empty());
        ranges.sort_by_key(|r| (r.start, r.end));
        ranges.dedup();
        FunctionMap { ranges }
    }

    /// The innermost (latest starting) range holding `ip`, looking back over a few ranges that
    /// start before it (nested ranges, e.g. a local label with its own symbol, are rare).
    pub(super) fn containing(&self, ip: u64) -> Option<Range<u64>> {
        let after = self.ranges.partition_point(|r| r.start <= ip);
        self.ranges[..after]
            .iter()
            .rev()
            .take(16)
            .find(|r| r.contains(&ip))
            .cloned()
    }
}

/// Where a sampled ip sits in its function's decoded code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Position {
    /// The ip is not an instruction boundary found by decoding from the function's entry (no
    /// function known, bytes missing, or code the linear decode does not reach).
    Unknown,
    /// The ip starts a basic block: a branch target, the entry, or after a branch or call.
    BlockStart,
    /// The ip follows, in the same basic block, the instruction at this address.
    After(u64),
}

/// One function's instruction starts (offsets from its entry), a flag bit marking block leaders.
pub(super) struct Layout {
    start: u64,
    entries: Vec<u32>,
}

/// The flag bit of [`Layout::entries`] marking a basic-block leader.
const LEADER: u32 = 1 << 31;

impl Layout {
    /// Decode `code` (the function's bytes, entry at link-time address `start`) linearly,
    /// stopping at the first invalid instruction. Leaders are the entry, every direct branch or
    /// call target inside the function, and every instruction after one that changes control
    /// flow (branches, calls, returns, syscalls, traps).
    pub(super) fn decode(start: u64, code: &[u8]) -> Layout {
        let len = code.len().min(MAX_FUNCTION_BYTES as usize);
        let mut decoder = Decoder::with_ip(64, &code[..len], start, DecoderOptions::NONE);
        let mut entries = Vec::new();
        let mut targets = Vec::new();
        let mut instr = Instruction::default();
        let mut leader = true;
        while decoder.can_decode() {
            decoder.decode_out(&mut instr);
            if instr.is_invalid() {
                break;
            }
            let offset = (instr.ip() - start) as u32;
            entries.push(offset | if leader { LEADER } else { 0 });
            leader = instr.flow_control() != FlowControl::Next;
            if instr.op_count() > 0 && instr.op0_kind() == OpKind::NearBranch64 {
                targets.push(instr.near_branch_target());
            }
        }
        let mut layout = Layout { start, entries };
        for target in targets {
            layout.mark_leader(target);
        }
        layout
    }

    /// Mark the instruction starting at `ip` (if one does) as a block leader.
    fn mark_leader(&mut self, ip: u64) {
        if let Some(i) = self.index_of(ip) {
            self.entries[i] |= LEADER;
        }
    }

    /// The index of the instruction starting at `ip`.
    fn index_of(&self, ip: u64) -> Option<usize> {
        let offset = u32::try_from(ip.checked_sub(self.start)?).ok()?;
        self.entries
            .binary_search_by_key(&offset, |e| e & !LEADER)
            .ok()
    }

    /// Where `ip` is in this function.
    pub(super) fn position(&self, ip: u64) -> Position {
        match self.index_of(ip) {
            None => Position::Unknown,
            Some(i) if i == 0 || self.entries[i] & LEADER != 0 => Position::BlockStart,
            Some(i) => Position::After(self.start + u64::from(self.entries[i - 1] & !LEADER)),
        }
    }

    /// How many instructions the linear decode found.
    #[cfg(test)]
    pub(super) fn instruction_count(&self) -> usize {
        self.entries.len()
    }
}

/// The link-time ranges of the functions an ELF image describes: `STT_FUNC` symbols with a size
/// (`.symtab` and `.dynsym`) and `.eh_frame` FDEs (present even in stripped binaries).
pub(super) fn elf_function_ranges(elf: &object::File<'_>) -> Vec<Range<u64>> {
    use object::{Object, ObjectSymbol, SymbolKind};
    let symbols = elf
        .symbols()
        .chain(elf.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
        .map(|s| s.address()..s.address().saturating_add(s.size()));
    let mut ranges: Vec<Range<u64>> = symbols.collect();
    ranges.extend(fde_ranges(elf));
    ranges
}

/// The ranges of the `.eh_frame` FDEs; entries that do not parse are skipped.
fn fde_ranges(elf: &object::File<'_>) -> Vec<Range<u64>> {
    use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindSection};
    use object::{Object, ObjectSection};
    let Some(section) = elf.section_by_name(".eh_frame") else {
        return Vec::new();
    };
    let Ok(data) = section.data() else {
        return Vec::new();
    };
    let eh_frame = EhFrame::new(data, LittleEndian);
    let mut bases = BaseAddresses::default().set_eh_frame(section.address());
    if let Some(text) = elf.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    let mut entries = eh_frame.entries(&bases);
    let mut ranges = Vec::new();
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        if let Ok(fde) = partial.parse(EhFrame::cie_from_offset) {
            let start = fde.initial_address();
            ranges.push(start..start.saturating_add(fde.len()));
        }
    }
    ranges
}
