//! Jump tables: finding the table an indirect jump reads, its bounds and its entries.
//!
//! The registers an indirect jump depends on are traced back to their definitions along every
//! path into the jump (fall-through and direct branches), not only through the straight-line code
//! before it: clang and rustc hoist the table's `lea` out of the loop that holds the `switch`.
//! A register counts as defined when every path that reaches a definition reaches the same one;
//! paths that start in code nothing is known to reach (other cases of the same unresolved table)
//! are left aside, paths from the procedure's entry make the register unknown.

use super::builder::Builder;
use super::decode::Flow;
use super::CallKind;
use iced_x86::{Instruction, Mnemonic, OpKind, Register};

/// Instructions scanned backwards from an indirect jump when looking for a bounds check.
const TABLE_SCAN_WINDOW: usize = 24;
/// Most instructions visited when tracing a register back to its definition.
const DEFINITION_SEARCH_LIMIT: usize = 256;
/// Most jump-table entries read when no bound was found.
const MAX_TABLE_ENTRIES: usize = 4096;

impl<'d> Builder<'d, '_> {
    /// An indirect jump: a jump table, a tail call through memory, or unknown.
    pub(super) fn indirect_jump(&mut self, i: usize) {
        let insn = &self.d.insns[i];
        if let Some((table, targets)) = self.jump_table(i) {
            for &t in &targets {
                self.leader[t] = true;
                self.target[t] = true;
            }
            self.tables.push((i, table, targets));
        } else if self.through_pointer(i) {
            let insn = *insn;
            self.call_site(&insn, None, CallKind::TailCall, false);
            self.pointer_tail_calls.push(i);
        }
    }

    /// True if the indirect jump at `i` goes through a pointer read from memory without an
    /// index (`jmp *foo@GOTPCREL(%rip)`, `jmp *0x30(%rax)`, or `mov 0x30(%rax),%rax; jmp
    /// *%rax`): a tail call through the GOT, a vtable or a function pointer, not a jump table
    /// (tables are read with an index).
    fn through_pointer(&self, i: usize) -> bool {
        let insn = &self.d.insns[i];
        let load = match insn.op0_kind() {
            OpKind::Memory => insn,
            OpKind::Register => match self.definition(i, insn.op0_register()) {
                Some(w) => &self.d.insns[w],
                None => return false,
            },
            _ => return false,
        };
        let reads_memory = load.op_count() > 0
            && (0..load.op_count()).any(|k| load.op_kind(k) == OpKind::Memory)
            && matches!(load.mnemonic(), Mnemonic::Mov | Mnemonic::Jmp);
        reads_memory && load.memory_index() == Register::None
    }

    /// Recognise and read a jump table for the indirect jump at index `i`.
    fn jump_table(&mut self, i: usize) -> Option<(u64, Vec<usize>)> {
        let insn = &self.d.insns[i];
        let shape = match insn.op0_kind() {
            OpKind::Memory => absolute_table(insn)?,
            OpKind::Register => self.register_table(i, insn.op0_register())?,
            _ => return None,
        };
        let bound = self.bounds_check(i).or_else(|| self.index_mask(i));
        let targets = self.read_table(shape, bound);
        (!targets.is_empty()).then_some((shape.table, targets))
    }

    /// The table behind `jmp *%reg`: an entry loaded from memory, either the target itself
    /// (absolute entries) or an offset added to a base the code took with `lea B(%rip)`.
    fn register_table(&self, i: usize, reg: Register) -> Option<TableShape> {
        let w = self.definition(i, reg)?;
        let writer = &self.d.insns[w];
        match writer.mnemonic() {
            Mnemonic::Add if writer.op1_kind() == OpKind::Register => {
                let (a, b) = (writer.op0_register(), writer.op1_register());
                [(a, b), (b, a)].into_iter().find_map(|(entry, base)| {
                    let base = self.rip_address(w, base)?;
                    let load = self.definition(w, entry)?;
                    self.relative_table(load, base)
                })
            }
            Mnemonic::Mov | Mnemonic::Movsxd | Mnemonic::Movzx
                if writer.op1_kind() == OpKind::Memory =>
            {
                absolute_table(writer).or_else(|| self.based_absolute_table(w))
            }
            _ => None,
        }
    }

    /// A load of entries `(B', idx, size)` whose sum with `base` is the target.
    fn relative_table(&self, load: usize, base: u64) -> Option<TableShape> {
        let insn = &self.d.insns[load];
        let entry_size = insn.memory_size().size();
        // 32-bit offsets are signed (the table follows the code); `-O0` loads them with a
        // plain `mov` and sign-extends afterwards (`cltq`).
        let signed = match insn.mnemonic() {
            Mnemonic::Movsxd | Mnemonic::Movsx => true,
            Mnemonic::Mov => entry_size == 4,
            Mnemonic::Movzx => false,
            _ => return None,
        };
        if insn.op1_kind() != OpKind::Memory || insn.memory_index() == Register::None {
            return None;
        }
        let table = self.table_address(load, insn)?;
        Some(TableShape {
            table,
            entry_size,
            encoding: Encoding::Relative { base, signed },
        })
    }

    /// `mov (%rB,%idx,8),%r` with `%rB` set by `lea T(%rip)`: absolute entries at `T`.
    fn based_absolute_table(&self, load: usize) -> Option<TableShape> {
        let insn = &self.d.insns[load];
        let entry_size = insn.memory_size().size();
        if insn.memory_index() == Register::None || !matches!(entry_size, 4 | 8) {
            return None;
        }
        Some(TableShape {
            table: self.table_address(load, insn)?,
            entry_size,
            encoding: Encoding::Absolute,
        })
    }

    /// The address a table load reads at index 0: its displacement, plus the `lea` address
    /// of its base register if it has one (or of its unscaled index register, as `-O0` code
    /// adds the scaled index as the base: `mov (%rdx,%rax,1)` with `%rax` the table).
    fn table_address(&self, load: usize, insn: &Instruction) -> Option<u64> {
        let disp = insn.memory_displacement64();
        let (base, index) = (insn.memory_base(), insn.memory_index());
        match base {
            Register::None => Some(disp),
            Register::RIP => Some(insn.ip_rel_memory_address()),
            _ => self
                .rip_address(load, base)
                .or_else(|| {
                    let unscaled = insn.memory_index_scale() == 1;
                    unscaled.then(|| self.rip_address(load, index)).flatten()
                })?
                .checked_add(disp),
        }
    }

    /// The address put in `reg` by a `lea X(%rip)` reaching instruction `i`.
    fn rip_address(&self, i: usize, reg: Register) -> Option<u64> {
        let lea = &self.d.insns[self.definition(i, reg)?];
        (lea.mnemonic() == Mnemonic::Lea && lea.is_ip_rel_memory_operand())
            .then(|| lea.ip_rel_memory_address())
    }

    /// The one instruction that writes the full register of `reg` on every path into `i` that
    /// reaches a write (see the module's documentation).
    fn definition(&self, i: usize, reg: Register) -> Option<usize> {
        let full = reg.full_register();
        let mut found: Option<usize> = None;
        let mut seen = vec![i];
        let mut work = vec![i];
        while let Some(at) = work.pop() {
            for p in self.predecessors(at) {
                if seen.contains(&p) {
                    continue;
                }
                if seen.len() >= DEFINITION_SEARCH_LIMIT {
                    return None;
                }
                seen.push(p);
                let insn = &self.d.insns[p];
                if writes_register(insn, full) {
                    match found {
                        Some(f) if !same_definition(&self.d.insns[f], insn) => return None,
                        _ => found = Some(p),
                    }
                } else if matches!(self.d.flows[p], Flow::Call { .. }) && !callee_saved(full) {
                    return None;
                } else {
                    work.push(p);
                }
            }
            if at == self.entry {
                return None;
            }
        }
        found
    }

    /// Instructions control can come from into instruction `i`: the one before it if it falls
    /// through, and direct branches to it.
    fn predecessors(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        let d = self.d;
        let fall = (i > 0
            && d.insns[i - 1].next_ip() == d.insns[i].ip()
            && d.flows[i - 1].falls_through())
        .then(|| i - 1);
        let from = self.incoming.partition_point(|&(t, _)| (t as usize) < i);
        let branches = self.incoming[from..]
            .iter()
            .take_while(move |&&(t, _)| t as usize == i)
            .map(|&(_, s)| s as usize);
        fall.into_iter().chain(branches)
    }

    /// Indices before `i`, nearest first, within the scan window and not across an
    /// unconditional transfer or a call (which would make the code before it unrelated).
    fn scan_back(&self, i: usize) -> impl Iterator<Item = usize> + 'd {
        let d = self.d;
        (i.saturating_sub(TABLE_SCAN_WINDOW)..i)
            .rev()
            .take_while(move |&j| {
                let ok = d.insns[j].next_ip() == d.insns[j + 1].ip();
                ok && matches!(d.flows[j], Flow::Next | Flow::CondJump(_))
            })
    }

    /// Number of table entries implied by a nearby `cmp $N, x; ja/jae/jb/jbe` bounds check.
    fn bounds_check(&self, i: usize) -> Option<usize> {
        let j = self.scan_back(i).find(|&j| {
            matches!(
                self.d.insns[j].mnemonic(),
                Mnemonic::Ja | Mnemonic::Jae | Mnemonic::Jb | Mnemonic::Jbe
            )
        })?;
        let cmp = &self.d.insns[j.checked_sub(1)?];
        if cmp.mnemonic() != Mnemonic::Cmp || !has_immediate(cmp) {
            return None;
        }
        let n = usize::try_from(cmp.immediate(1)).ok()?;
        let count = match self.d.insns[j].mnemonic() {
            Mnemonic::Ja | Mnemonic::Jbe => n.checked_add(1)?,
            _ => n,
        };
        (count <= MAX_TABLE_ENTRIES).then_some(count)
    }

    /// Number of table entries implied by masking the index (`and $2^k-1, x`) when the
    /// compiler knew no bounds check was needed (`switch (v & 3)` with every case present).
    fn index_mask(&self, i: usize) -> Option<usize> {
        let j = self.scan_back(i).find(|&j| {
            let insn = &self.d.insns[j];
            insn.mnemonic() == Mnemonic::And && has_immediate(insn)
        })?;
        let mask = self.d.insns[j].immediate(1);
        let count = usize::try_from(mask.checked_add(1)?).ok()?;
        (count.is_power_of_two() && count <= MAX_TABLE_ENTRIES).then_some(count)
    }

    /// Read entries until `bound`, the first entry leaving the procedure, or unreadable data.
    fn read_table(&mut self, shape: TableShape, bound: Option<usize>) -> Vec<usize> {
        let mut targets = Vec::new();
        let limit = bound.unwrap_or(MAX_TABLE_ENTRIES);
        for k in 0..limit as u64 {
            let Some(at) = shape.table.checked_add(k * shape.entry_size as u64) else {
                break;
            };
            let Some(bytes) = (self.env.read_data)(at, shape.entry_size) else {
                break;
            };
            let Some(target) = shape.target(bytes) else {
                break;
            };
            if !self.d.contains(target) {
                break;
            }
            match self.table_target(target) {
                Some(t) => targets.push(t),
                None => break,
            }
        }
        targets.sort_unstable();
        targets.dedup();
        targets
    }
}

/// How a table entry becomes a target.
#[derive(Clone, Copy, Debug)]
enum Encoding {
    /// The entry is the target's address.
    Absolute,
    /// The entry is an offset from `base` (the table itself for gcc, clang and rustc).
    Relative { base: u64, signed: bool },
}

/// Where a jump table lives and how to turn an entry into a target.
#[derive(Clone, Copy, Debug)]
struct TableShape {
    table: u64,
    /// 1, 2, 4 or 8 bytes per entry.
    entry_size: usize,
    encoding: Encoding,
}

impl TableShape {
    fn target(&self, bytes: &[u8]) -> Option<u64> {
        let bytes = bytes.get(..self.entry_size)?;
        let mut raw = [0u8; 8];
        raw[..bytes.len()].copy_from_slice(bytes);
        let unsigned = u64::from_le_bytes(raw);
        match self.encoding {
            Encoding::Absolute => Some(unsigned),
            Encoding::Relative { base, signed } => {
                let shift = 64 - 8 * self.entry_size as u32;
                let offset = if signed {
                    ((unsigned << shift) as i64) >> shift
                } else {
                    unsigned as i64
                };
                base.checked_add_signed(offset)
            }
        }
    }
}

/// `[T + idx*scale]` with no base register: an absolute table of 8-byte addresses (or 4-byte
/// ones, zero-extended, in non-PIC code) at `T`.
fn absolute_table(insn: &Instruction) -> Option<TableShape> {
    let entry_size = insn.memory_size().size();
    let absolute = insn.memory_base() == Register::None
        && insn.memory_index() != Register::None
        && matches!(entry_size, 4 | 8);
    absolute.then(|| TableShape {
        table: insn.memory_displacement64(),
        entry_size,
        encoding: Encoding::Absolute,
    })
}

/// True if `insn` overwrites `full` (a full-width register) as its first operand.
fn writes_register(insn: &Instruction, full: Register) -> bool {
    insn.op_count() > 0
        && insn.op0_kind() == OpKind::Register
        && insn.op0_register().full_register() == full
        && !matches!(
            insn.mnemonic(),
            Mnemonic::Cmp | Mnemonic::Test | Mnemonic::Bt
        )
}

/// Two writes of a register that give it the same value: the same instruction, or `lea`s of
/// the same address (a table base taken again on another path).
fn same_definition(a: &Instruction, b: &Instruction) -> bool {
    a.ip() == b.ip()
        || (a.mnemonic() == Mnemonic::Lea
            && b.mnemonic() == Mnemonic::Lea
            && a.is_ip_rel_memory_operand()
            && b.is_ip_rel_memory_operand()
            && a.ip_rel_memory_address() == b.ip_rel_memory_address())
}

/// Registers a call leaves intact (System V x86-64 ABI).
fn callee_saved(full: Register) -> bool {
    matches!(
        full,
        Register::RBX
            | Register::RBP
            | Register::R12
            | Register::R13
            | Register::R14
            | Register::R15
    )
}

/// True if the second operand of `insn` is an immediate.
fn has_immediate(insn: &Instruction) -> bool {
    insn.op_count() == 2
        && matches!(
            insn.op1_kind(),
            OpKind::Immediate8
                | OpKind::Immediate8to32
                | OpKind::Immediate8to64
                | OpKind::Immediate32
                | OpKind::Immediate32to64
        )
}
