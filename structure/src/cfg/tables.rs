//! Jump tables: finding the table an indirect jump reads, its bounds check and its entries.

use super::builder::Builder;
use super::decode::Flow;
use super::CallKind;
use iced_x86::{Instruction, Mnemonic, OpKind, Register};

/// Instructions scanned backwards from an indirect jump when looking for a jump table.
const TABLE_SCAN_WINDOW: usize = 24;
/// Most jump-table entries read when no bounds check was found.
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
        } else if insn.op0_kind() == OpKind::Memory && insn.is_ip_rel_memory_operand() {
            // `jmp *foo@GOTPCREL(%rip)`: a tail call through the GOT.
            let insn = *insn;
            self.call_site(&insn, None, CallKind::TailCall);
        }
    }

    /// Recognise and read a jump table for the indirect jump at index `i`.
    fn jump_table(&mut self, i: usize) -> Option<(u64, Vec<usize>)> {
        let insn = &self.d.insns[i];
        let shape = match insn.op0_kind() {
            OpKind::Memory => absolute_table(insn)?,
            OpKind::Register => self.register_table(i, insn.op0_register())?,
            _ => return None,
        };
        let bound = self.bounds_check(i);
        let targets = self.read_table(shape, bound);
        (!targets.is_empty()).then_some((shape.table, targets))
    }

    /// The table behind `jmp *%reg`: relative (`add` of a `lea T(%rip)`) or absolute (`mov`).
    fn register_table(&self, i: usize, reg: Register) -> Option<TableShape> {
        let w = self.last_writer(i, reg)?;
        let writer = &self.d.insns[w];
        match writer.mnemonic() {
            Mnemonic::Add if writer.op1_kind() == OpKind::Register => {
                [writer.op1_register(), writer.op0_register()]
                    .into_iter()
                    .find_map(|r| {
                        let lea = &self.d.insns[self.last_writer(w, r)?];
                        (lea.mnemonic() == Mnemonic::Lea && lea.is_ip_rel_memory_operand()).then(
                            || TableShape {
                                table: lea.ip_rel_memory_address(),
                                entry_size: 4,
                            },
                        )
                    })
            }
            Mnemonic::Mov if writer.op1_kind() == OpKind::Memory => absolute_table(writer),
            _ => None,
        }
    }

    /// Index of the nearest instruction before `i` (same straight-line stretch) that writes
    /// the full register of `reg` as its first operand.
    fn last_writer(&self, i: usize, reg: Register) -> Option<usize> {
        let full = reg.full_register();
        for j in self.scan_back(i) {
            let insn = &self.d.insns[j];
            let writes = insn.op_count() > 0
                && insn.op0_kind() == OpKind::Register
                && insn.op0_register().full_register() == full
                && !matches!(
                    insn.mnemonic(),
                    Mnemonic::Cmp | Mnemonic::Test | Mnemonic::Bt
                );
            if writes {
                return Some(j);
            }
        }
        None
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
        let imm_kind = cmp.op_count() == 2
            && matches!(
                cmp.op1_kind(),
                OpKind::Immediate8
                    | OpKind::Immediate8to32
                    | OpKind::Immediate8to64
                    | OpKind::Immediate32
                    | OpKind::Immediate32to64
            );
        if cmp.mnemonic() != Mnemonic::Cmp || !imm_kind {
            return None;
        }
        let n = usize::try_from(cmp.immediate(1)).ok()?;
        let count = match self.d.insns[j].mnemonic() {
            Mnemonic::Ja | Mnemonic::Jbe => n.checked_add(1)?,
            _ => n,
        };
        (count <= MAX_TABLE_ENTRIES).then_some(count)
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

/// Where a jump table lives and how to turn an entry into a target.
#[derive(Clone, Copy, Debug)]
struct TableShape {
    table: u64,
    /// 4: signed 32-bit offsets from `table`; 8: absolute 64-bit addresses.
    entry_size: usize,
}

impl TableShape {
    fn target(&self, bytes: &[u8]) -> Option<u64> {
        match self.entry_size {
            4 => {
                let raw: [u8; 4] = bytes.get(..4)?.try_into().ok()?;
                let off = i64::from(i32::from_le_bytes(raw));
                self.table.checked_add_signed(off)
            }
            _ => {
                let raw: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
                Some(u64::from_le_bytes(raw))
            }
        }
    }
}

/// `[T + idx*8]` with no base register: an absolute table of 64-bit addresses at `T`.
fn absolute_table(insn: &Instruction) -> Option<TableShape> {
    let absolute = insn.memory_base() == Register::None
        && insn.memory_index() != Register::None
        && insn.memory_index_scale() == 8;
    absolute.then(|| TableShape {
        table: insn.memory_displacement64(),
        entry_size: 8,
    })
}
