//! What the loop tests share: a tiny assembler for hand-made machine code, and the invariants
//! every control-flow graph and loop forest must satisfy.
#![allow(dead_code)]

use std::collections::HashMap;

use structure::cfg::{Cfg, CfgEnv, CodeRange};
use structure::loops::{LoopForest, LoopId};

/// A tiny x86-64 assembler: raw opcode bytes plus labelled rel8/rel32 branch fixups.
pub struct Asm {
    base: u64,
    code: Vec<u8>,
    labels: HashMap<&'static str, u64>,
    fixups: Vec<(usize, &'static str, bool)>,
}

impl Asm {
    pub fn new(base: u64) -> Self {
        Asm {
            base,
            code: Vec::new(),
            labels: HashMap::new(),
            fixups: Vec::new(),
        }
    }
    pub fn here(&self) -> u64 {
        self.base + self.code.len() as u64
    }
    pub fn op(&mut self, bytes: &[u8]) -> &mut Self {
        self.code.extend_from_slice(bytes);
        self
    }
    pub fn label(&mut self, name: &'static str) -> &mut Self {
        self.labels.insert(name, self.here());
        self
    }
    /// `opcode` followed by an 8-bit displacement to `label`.
    pub fn rel8(&mut self, opcode: &[u8], label: &'static str) -> &mut Self {
        self.op(opcode);
        self.fixups.push((self.code.len(), label, false));
        self.op(&[0])
    }
    /// `opcode` followed by a 32-bit displacement to `label`.
    pub fn rel32(&mut self, opcode: &[u8], label: &'static str) -> &mut Self {
        self.op(opcode);
        self.fixups.push((self.code.len(), label, true));
        self.op(&[0; 4])
    }
    /// `opcode` followed by a 32-bit displacement to the absolute address `target`.
    pub fn rel32_to(&mut self, opcode: &[u8], target: u64) -> &mut Self {
        self.op(opcode);
        let next = self.here() + 4;
        let disp = (target as i64 - next as i64) as i32;
        self.op(&disp.to_le_bytes())
    }
    pub fn finish(&mut self) -> Vec<u8> {
        for &(at, label, wide) in &self.fixups {
            let target = self.labels[label] as i64;
            let next = (self.base + at as u64 + if wide { 4 } else { 1 }) as i64;
            let disp = target - next;
            if wide {
                self.code[at..at + 4].copy_from_slice(&(disp as i32).to_le_bytes());
            } else {
                self.code[at] = i8::try_from(disp).expect("rel8 in range") as u8;
            }
        }
        self.code.clone()
    }
    pub fn addr(&self, label: &str) -> u64 {
        self.labels[label]
    }
}

pub const INC_EAX: &[u8] = &[0xff, 0xc0];
pub const INC_ECX: &[u8] = &[0xff, 0xc1];
pub const CMP_ECX_10: &[u8] = &[0x83, 0xf9, 0x0a];
pub const TEST_EDI: &[u8] = &[0x85, 0xff];
pub const RET: &[u8] = &[0xc3];
pub const JE: &[u8] = &[0x74];
pub const JL: &[u8] = &[0x7c];
pub const JMP8: &[u8] = &[0xeb];
pub const JNE: &[u8] = &[0x75];
/// `mov (%rsi),%eax`
pub const LOAD_EAX: &[u8] = &[0x8b, 0x06];
/// `mov 0x4(%rsi),%eax`
pub const LOAD_EAX_4: &[u8] = &[0x8b, 0x46, 0x04];
/// `test %eax,%eax`
pub const TEST_EAX: &[u8] = &[0x85, 0xc0];

pub fn build(base: u64, bytes: &[u8]) -> (Cfg, LoopForest) {
    let cfg = Cfg::build(&[CodeRange { start: base, bytes }], &CfgEnv::blind());
    let forest = LoopForest::build(&cfg);
    (cfg, forest)
}

/// The forest of `bytes` at `base`, checked ([`check_invariants`]) to hold an irreducible loop.
pub fn irreducible_forest(base: u64, bytes: &[u8]) -> LoopForest {
    let (cfg, forest) = build(base, bytes);
    check_invariants(&cfg, &forest);
    let irreducible = forest.loops.iter().any(|l| l.irreducible);
    assert!(irreducible, "{:?}", forest.loops);
    forest
}

/// Structural invariants every CFG and forest must satisfy, whatever the input.
pub fn check_invariants(cfg: &Cfg, forest: &LoopForest) {
    for (i, b) in cfg.blocks.iter().enumerate() {
        assert!(b.start < b.end && b.start <= b.last_insn && b.last_insn < b.end);
        assert!(
            cfg.ranges.iter().any(|&(s, e)| s <= b.start && b.end <= e),
            "block {b:?} outside {:x?}",
            cfg.ranges
        );
        if i > 0 {
            assert!(cfg.blocks[i - 1].end <= b.start, "blocks overlap");
        }
        for e in &b.succs {
            assert!(cfg
                .block(e.to)
                .preds
                .contains(&structure::cfg::BlockId(i as u32)));
        }
    }
    for (i, l) in forest.loops.iter().enumerate() {
        assert!(l.blocks.contains(&l.header));
        assert!(l.own_blocks.iter().all(|b| l.blocks.contains(b)));
        assert!(l.entries.iter().all(|b| l.blocks.contains(b)));
        let kinds = [l.irreducible, l.duplicated_test, l.split_entry];
        assert_eq!(kinds.contains(&true), l.entries.len() > 1, "{l:?}");
        assert!(kinds.iter().filter(|&&k| k).count() <= 1, "{l:?}");
        match l.parent {
            Some(p) => {
                assert_eq!(forest.get(p).depth + 1, l.depth);
                assert!(forest.get(p).children.contains(&LoopId(i as u32)));
            }
            None => assert_eq!(l.depth, 1),
        }
    }
}
