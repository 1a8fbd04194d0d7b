//! CFG and loop-forest behaviour on hand-assembled machine code and on garbage bytes: shapes
//! that compilers produce rarely or not on demand (jump-table bounds, cold parts, noreturn
//! calls, padding, deep nests, irreducible regions), plus robustness.

mod common;

use std::collections::HashMap;

use common::*;
use structure::cfg::{CallKind, Cfg, CfgEnv, CodeRange, EdgeKind, Terminator};
use structure::loops::{LoopForest, LoopId, LOOP_BEGIN_TOLERANCE};

/// `if (edi == 0) goto inside; do { top: eax++ (`top` instructions); inside: ecx++; } while
/// (ecx < 10)`: a jump into the loop's body.
fn jump_into_the_body(top: usize) -> (Asm, Vec<u8>) {
    let mut a = Asm::new(0x1000);
    a.op(TEST_EDI).rel8(JE, "inside").label("top");
    for _ in 0..top {
        a.op(INC_EAX);
    }
    a.label("inside")
        .op(INC_ECX)
        .op(CMP_ECX_10)
        .rel8(JL, "top")
        .op(RET);
    let bytes = a.finish();
    (a, bytes)
}

/// With four instructions at `top`, a jump into the body: two entries, irreducible. With one
/// or three (at most three), the block entered from outside only leads to the other entry, as
/// where gcc's cross-jumping merged an increment before the loop with the one at its bottom:
/// split for the path from outside, the loop is natural, headed by the block both paths reach.
/// Either way the machine code's two entries are listed, the header first.
#[test]
fn jump_into_loop_body_makes_two_entries_and_a_short_block_before_the_header_is_split() {
    for (top, split) in [(4, false), (1, true), (3, true)] {
        let (a, bytes) = jump_into_the_body(top);
        let (cfg, forest) = build(0x1000, &bytes);
        check_invariants(&cfg, &forest);
        assert_eq!(forest.len(), 1);
        let l = &forest.loops[0];
        assert_eq!(
            (l.irreducible, l.split_entry),
            (!split, split),
            "{top}: {l:?}"
        );
        let starts: Vec<u64> = l.entries.iter().map(|&b| cfg.block(b).start).collect();
        // Depth-first search reaches `inside` first (taken arm of the je), so it is the header.
        assert_eq!(starts, vec![a.addr("inside"), a.addr("top")]);
        let blocks: Vec<u64> = l.blocks.iter().map(|&b| cfg.block(b).start).collect();
        assert_eq!(blocks, vec![a.addr("top"), a.addr("inside")], "{top}");
    }
}

/// gcc's jump threading copies a loop's test with the load it tests (`while ((p = x->next))`):
/// one copy before the loop falls into the body or leaves, the other at its bottom, entered
/// from outside too, branches back on the opposite condition. Same code, same choice: one test,
/// a natural loop. With `bottom_load` another load, or `bottom_jump` the same condition to the
/// other arm, the two compute different choices and the loop has two entries (its body is
/// long enough not to be split).
fn test_with_its_load(bottom_load: &[u8], bottom_jump: &[u8]) -> (Asm, Vec<u8>) {
    let mut a = Asm::new(0x1a00);
    a.op(TEST_EDI)
        .rel8(JE, "bottom")
        .op(LOAD_EAX)
        .op(TEST_EAX)
        .rel8(JE, "out")
        .label("body")
        .op(INC_ECX)
        .op(INC_ECX)
        .op(INC_ECX)
        .op(INC_ECX)
        .label("bottom")
        .op(bottom_load)
        .op(TEST_EAX)
        .rel8(bottom_jump, "body")
        .label("out")
        .op(RET);
    let bytes = a.finish();
    (a, bytes)
}

#[test]
fn a_loop_test_copied_with_its_load_and_the_opposite_branch_is_one_natural_loop() {
    let (a, bytes) = test_with_its_load(LOAD_EAX, JNE);
    let (cfg, forest) = build(0x1a00, &bytes);
    check_invariants(&cfg, &forest);
    assert_eq!(forest.len(), 1, "{:?}", forest.loops);
    let l = &forest.loops[0];
    assert!(l.duplicated_test && !l.irreducible, "{l:?}");
    assert_eq!(cfg.block(l.header).start, a.addr("body"));
    for (load, jump) in [(LOAD_EAX_4, JNE), (LOAD_EAX, JE)] {
        let (_, bytes) = test_with_its_load(load, jump);
        irreducible_forest(0x1a00, &bytes);
    }
}

/// The shape LLVM's tail duplication leaves (core::slice::sort's drift sort in ripgrep): the
/// loop's test copied before the loop and at its bottom, both copies branching to `b` or to `a`
/// (the second through the block at `on`). With `on_only_jumps` that block only jumps to `a`;
/// otherwise it does work of its own first, and the two copies no longer lead to the same blocks.
fn test_copied_to_the_bottom(on_only_jumps: bool) -> (Asm, Vec<u8>) {
    let mut a = Asm::new(0x1800);
    a.op(TEST_EDI)
        .rel8(JE, "b") // the test's first copy: to b, or on into a
        .label("a")
        .op(INC_EAX)
        .rel8(JMP8, "merge")
        .label("b")
        .op(INC_ECX)
        .label("merge")
        .op(CMP_ECX_10)
        .rel8(JL, "latch")
        .op(RET)
        .label("latch")
        .op(TEST_EDI)
        .rel8(JE, "b") // its copy at the bottom: to b, or through `on` to a
        .label("on");
    if !on_only_jumps {
        a.op(INC_EAX);
    }
    a.rel8(JMP8, "a");
    let bytes = a.finish();
    (a, bytes)
}

/// Both copies of the test lead to the same blocks: the machine code's cycle has two entries,
/// but they come from one test: a natural loop, not an irreducible one.
#[test]
fn a_loop_test_duplicated_before_the_loop_and_at_its_bottom_is_one_natural_loop() {
    let (a, bytes) = test_copied_to_the_bottom(true);
    let (cfg, forest) = build(0x1800, &bytes);
    check_invariants(&cfg, &forest);
    assert_eq!(forest.len(), 1, "{:?}", forest.loops);
    let l = &forest.loops[0];
    assert!(!l.irreducible && l.duplicated_test, "{l:?}");
    let starts: Vec<u64> = l.entries.iter().map(|&b| cfg.block(b).start).collect();
    assert_eq!(starts, vec![a.addr("a"), a.addr("b")]);
    let blocks: Vec<u64> = l.blocks.iter().map(|&b| cfg.block(b).start).collect();
    assert_eq!(
        blocks,
        ["a", "b", "merge", "latch", "on"].map(|l| a.addr(l)),
        "the jump on stays in the loop"
    );
    assert!(
        cfg.block(cfg.block_at(a.addr("on")).unwrap())
            .passes_through
    );

    // The bottom copy does work before it reaches `a`: really two entries.
    let (_, bytes) = test_copied_to_the_bottom(false);
    let forest = irreducible_forest(0x1800, &bytes);
    assert!(forest.loops.iter().all(|l| !l.duplicated_test));
}

/// gcc's shape of the same: the test at the loop's bottom, jumped to from one path before the
/// loop, while another path runs a copy of the test that falls into the body. Both copies only
/// compare and branch; the one at the bottom belongs to the loop, the one before it does not.
#[test]
fn a_loop_entered_at_its_bottom_test_or_through_a_copy_of_it_is_natural() {
    let mut a = Asm::new(0x1c00);
    a.op(TEST_EDI)
        .rel8(JE, "test") // one path: straight to the test at the bottom
        .label("copy")
        .op(CMP_ECX_10)
        .rel8(&[0x7d], "out") // jge: the copy, into the body or out
        .label("body")
        .op(INC_EAX)
        .op(INC_ECX)
        .label("test")
        .op(CMP_ECX_10)
        .rel8(JL, "body")
        .label("out")
        .op(RET);
    let (cfg, forest) = build(0x1c00, &a.finish());
    check_invariants(&cfg, &forest);
    assert_eq!(forest.len(), 1, "{:?}", forest.loops);
    let l = &forest.loops[0];
    assert!(!l.irreducible && l.duplicated_test, "{l:?}");
    let blocks: Vec<u64> = l.blocks.iter().map(|&b| cfg.block(b).start).collect();
    assert_eq!(blocks, vec![a.addr("body"), a.addr("test")]);
    assert_eq!(cfg.block(l.header).start, a.addr("body"));
}

#[test]
fn nested_reducible_loops_have_headers_latches_and_own_blocks() {
    let mut a = Asm::new(0x2000);
    a.label("outer")
        .op(INC_EAX)
        .label("inner")
        .op(INC_ECX)
        .op(CMP_ECX_10)
        .rel8(JL, "inner")
        .op(&[0x83, 0xf8, 0x64]) // cmp eax, 100
        .rel8(JL, "outer")
        .op(RET);
    let (cfg, forest) = build(0x2000, &a.finish());
    check_invariants(&cfg, &forest);
    assert_eq!(forest.len(), 2);
    let outer = forest.get(forest.roots[0]);
    let inner = forest.get(outer.children[0]);
    assert_eq!(cfg.block(outer.header).start, a.addr("outer"));
    assert_eq!(cfg.block(inner.header).start, a.addr("inner"));
    assert_eq!((outer.depth, inner.depth), (1, 2));
    assert_eq!(inner.back_edge_sources, vec![inner.header]);
    assert_eq!(outer.blocks.len(), 3);
    assert_eq!(outer.own_blocks.len(), 2);
    assert!(!outer.own_blocks.contains(&inner.header));
    assert_eq!(forest.depth_of(inner.header), 2);
    let bb = forest.backward_branches(&cfg, forest.roots[0]);
    assert_eq!(bb.len(), 1, "the inner loop's branch is not the outer's");
    assert!(bb[0].to_entry && bb[0].conditional);
}

/// `cmp edi, 2; ja default; lea rdx, T(%rip); movslq (rdx,rdi,4), rax; add rdx, rax; jmp *rax`
/// with a table of 4 in-range entries: the bounds check limits it to 3.
#[test]
fn pic_jump_table_is_bounded_by_its_compare() {
    const TABLE: u64 = 0x9000;
    let mut a = Asm::new(0x3000);
    a.op(&[0x83, 0xff, 0x02])
        .rel8(&[0x77], "default")
        .rel32_to(&[0x48, 0x8d, 0x15], TABLE)
        .op(&[0x48, 0x63, 0x04, 0xba])
        .op(&[0x48, 0x01, 0xd0])
        .op(&[0xff, 0xe0]);
    for case in ["c0", "c1", "c2", "c3"] {
        a.label(case).op(INC_EAX).op(RET);
    }
    a.label("default").op(RET);
    let code = a.finish();
    let table: Vec<u8> = ["c0", "c1", "c2", "c3"]
        .iter()
        .flat_map(|c| ((a.addr(c) as i64 - TABLE as i64) as i32).to_le_bytes())
        .collect();
    let read = |addr: u64, len: usize| -> Option<&[u8]> {
        let off = usize::try_from(addr.checked_sub(TABLE)?).ok()?;
        table.get(off..off + len)
    };
    let env = CfgEnv {
        is_noreturn: &|_| false,
        read_data: &read,
        landing_pads: &[],
    };
    let cfg = Cfg::build(
        &[CodeRange {
            start: 0x3000,
            bytes: &code,
        }],
        &env,
    );
    let jt = cfg
        .blocks
        .iter()
        .find(|b| matches!(b.terminator, Terminator::JumpTable { table } if table == TABLE))
        .expect("jump table resolved");
    let targets: Vec<u64> = jt.succs.iter().map(|e| cfg.block(e.to).start).collect();
    assert_eq!(targets, vec![a.addr("c0"), a.addr("c1"), a.addr("c2")]);
    assert!(jt.succs.iter().all(|e| e.kind == EdgeKind::Table));
    // Without the reader the jump stays unresolved and the cases are unreachable.
    let (blind, _) = build(0x3000, &code);
    assert!(blind
        .blocks
        .iter()
        .any(|b| b.terminator == Terminator::IndirectJump));
}

/// `jmp *T(,%rdi,8)` with no bounds check: entries are read until one leaves the procedure.
#[test]
fn absolute_jump_table_stops_at_first_foreign_entry() {
    const TABLE: u64 = 0x7000;
    let mut a = Asm::new(0x4000);
    a.op(&[0xff, 0x24, 0xfd])
        .op(&(TABLE as u32).to_le_bytes())
        .label("c0")
        .op(RET)
        .label("c1")
        .op(INC_EAX)
        .op(RET);
    let code = a.finish();
    let entries = [
        a.addr("c1"),
        a.addr("c0"),
        a.addr("c1"),
        0x5_0000,
        a.addr("c0"),
    ];
    let table: Vec<u8> = entries.iter().flat_map(|e| e.to_le_bytes()).collect();
    let read = |addr: u64, len: usize| -> Option<&[u8]> {
        let off = usize::try_from(addr.checked_sub(TABLE)?).ok()?;
        table.get(off..off + len)
    };
    let env = CfgEnv {
        is_noreturn: &|_| false,
        read_data: &read,
        landing_pads: &[],
    };
    let cfg = Cfg::build(
        &[CodeRange {
            start: 0x4000,
            bytes: &code,
        }],
        &env,
    );
    let first = cfg.block(cfg.entry.unwrap());
    assert_eq!(first.terminator, Terminator::JumpTable { table: TABLE });
    let mut targets: Vec<u64> = first.succs.iter().map(|e| cfg.block(e.to).start).collect();
    targets.sort_unstable();
    assert_eq!(targets, vec![a.addr("c0"), a.addr("c1")]);
}

#[test]
fn calls_noreturn_tail_calls_and_padding() {
    const EXIT: u64 = 0x10_0000;
    const OTHER: u64 = 0x20_0000;
    let mut a = Asm::new(0x5000);
    a.label("top")
        .rel32_to(&[0xe8], OTHER) // call other: returns
        .op(TEST_EDI)
        .rel8(JE, "tail")
        .label("exit_call")
        .rel32_to(&[0xe8], EXIT) // call exit: never returns
        .label("after_exit")
        .op(&[0x0f, 0x1f, 0x40, 0x00]) // nopl 0(%rax): padding
        .label("tail")
        .rel32_to(&[0x0f, 0x84], OTHER) // je other: conditional tail call
        .rel8(JMP8, "top")
        .op(&[0x0f, 0x0b]); // ud2
    let code = a.finish();
    let env = CfgEnv {
        is_noreturn: &|t| t == EXIT,
        read_data: &|_, _| None,
        landing_pads: &[],
    };
    let cfg = Cfg::build(
        &[CodeRange {
            start: 0x5000,
            bytes: &code,
        }],
        &env,
    );
    let kinds: Vec<(CallKind, Option<u64>, bool)> = cfg
        .calls
        .iter()
        .map(|c| (c.kind, c.target, c.noreturn))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (CallKind::Call, Some(OTHER), false),
            (CallKind::Call, Some(EXIT), true),
            (CallKind::TailCall, Some(OTHER), false),
        ]
    );
    assert_eq!(cfg.calls[0].next_addr, 0x5005);
    let term = |addr: u64| cfg.block(cfg.block_at(addr).unwrap()).terminator;
    assert_eq!(
        term(a.addr("top")),
        Terminator::Branch,
        "a call does not end a block"
    );
    assert_eq!(term(a.addr("exit_call")), Terminator::NoReturnCall);
    assert_eq!(term(a.addr("after_exit")), Terminator::Padding);
    let padding = cfg.block(cfg.block_at(a.addr("after_exit")).unwrap());
    assert!(padding.succs.is_empty());
    let tail = cfg.block(cfg.block_at(a.addr("tail")).unwrap());
    assert_eq!(tail.terminator, Terminator::Branch);
    assert_eq!(tail.succs.len(), 1, "only the not-taken arm stays inside");
    let last = cfg.blocks.last().unwrap();
    assert_eq!(last.terminator, Terminator::Trap);
    let forest = LoopForest::build(&cfg);
    check_invariants(&cfg, &forest);
    assert_eq!(forest.len(), 1, "top -> tail -> top");
}

#[test]
fn loop_through_a_cold_part_spans_both_ranges() {
    let mut hot = Asm::new(0x6000);
    hot.label("top")
        .op(INC_ECX)
        .op(CMP_ECX_10)
        .rel32_to(&[0x0f, 0x8c], 0x8000) // jl cold
        .op(RET)
        .label("back")
        .rel32(&[0xe9], "top");
    let hot_code = hot.finish();
    let mut cold = Asm::new(0x8000);
    cold.op(INC_EAX).rel32_to(&[0xe9], hot.addr("back"));
    let cold_code = cold.finish();
    let cfg = Cfg::build(
        &[
            CodeRange {
                start: 0x6000,
                bytes: &hot_code,
            },
            CodeRange {
                start: 0x8000,
                bytes: &cold_code,
            },
        ],
        &CfgEnv::blind(),
    );
    assert_eq!(cfg.ranges.len(), 2);
    assert!(
        cfg.calls.is_empty(),
        "jumps between the parts are no tail calls"
    );
    let forest = LoopForest::build(&cfg);
    check_invariants(&cfg, &forest);
    assert_eq!(forest.len(), 1);
    let starts: Vec<u64> = forest.loops[0]
        .blocks
        .iter()
        .map(|&b| cfg.block(b).start)
        .collect();
    assert_eq!(starts, vec![0x6000, hot.addr("back"), 0x8000]);
}

#[test]
fn begin_line_widens_within_tolerance_only() {
    let mut a = Asm::new(0x1000);
    a.label("top")
        .op(INC_EAX) // line 9: far above
        .op(INC_EAX) // line 16
        .op(INC_EAX) // line 18
        .op(CMP_ECX_10) // line 20
        .rel8(JL, "top") // line 20: the backward branch
        .op(RET);
    let (cfg, forest) = build(0x1000, &a.finish());
    let lines: HashMap<u64, u32> = [
        (0x1000, 9),
        (0x1002, 16),
        (0x1004, 18),
        (0x1006, 20),
        (0x1009, 20),
    ]
    .into_iter()
    .collect();
    let line_of = |addr: u64| lines.get(&addr).map(|&l| (7, l));
    let id = LoopId(0);
    let l = forest
        .begin_line(&cfg, id, &line_of, LOOP_BEGIN_TOLERANCE)
        .unwrap();
    assert_eq!(
        (l.file, l.line, l.anchor, l.anchor_line),
        (7, 16, 0x1009, 20)
    );
    assert_eq!(forest.begin_line(&cfg, id, &line_of, 10).unwrap().line, 9);
    assert_eq!(forest.begin_line(&cfg, id, &line_of, 0).unwrap().line, 20);
    // Lines of another file never widen the loop.
    let other = |addr: u64| lines.get(&addr).map(|&l| (if l < 20 { 8 } else { 7 }, l));
    assert_eq!(forest.begin_line(&cfg, id, &other, 100).unwrap().line, 20);
    assert!(forest.begin_line(&cfg, id, &|_| None, 5).is_none());
}

#[test]
fn deep_nests_and_many_loops_stay_correct() {
    // 1500 perfectly nested loops: headers first, then the latches innermost first.
    const DEPTH: usize = 1500;
    let mut code = Vec::new();
    code.extend(INC_EAX.repeat(DEPTH));
    for level in (0..DEPTH).rev() {
        code.extend_from_slice(CMP_ECX_10);
        let next = code.len() + 6;
        let disp = (level * 2) as i64 - next as i64;
        code.extend_from_slice(&[0x0f, 0x8c]);
        code.extend_from_slice(&(disp as i32).to_le_bytes());
    }
    code.extend_from_slice(RET);
    let (cfg, forest) = build(0, &code);
    check_invariants(&cfg, &forest);
    assert_eq!(forest.len(), DEPTH);
    assert_eq!(forest.roots.len(), 1);
    assert_eq!(
        forest.loops.iter().map(|l| l.depth).max(),
        Some(DEPTH as u32)
    );

    // 50 000 sibling self-loops: `top: inc eax; jl top` repeated.
    let unit = [0xff, 0xc0, 0x7c, 0xfc];
    let code: Vec<u8> = unit.repeat(50_000);
    let (cfg, forest) = build(0, &code);
    assert_eq!(forest.len(), 50_000);
    assert_eq!(forest.roots.len(), 50_000);
    assert!(forest
        .loops
        .iter()
        .all(|l| l.blocks.len() == 1 && l.depth == 1));
    assert_eq!(cfg.len(), 50_000);
}

#[test]
fn garbage_bytes_never_panic() {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut total_loops = 0;
    for round in 0..300 {
        let len = (next() % 3000) as usize + round % 3;
        let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        // Bias some rounds toward branch opcodes so that graphs get dense and cyclic.
        if round % 2 == 0 {
            for b in bytes.iter_mut().step_by(3) {
                *b = [0x74, 0x7c, 0xeb, 0xe9, 0xff, 0x0f][(*b % 6) as usize];
            }
        }
        let base = next() % (1 << 40);
        let table = bytes.clone();
        let read = |addr: u64, n: usize| -> Option<&[u8]> {
            let off = usize::try_from(addr.checked_sub(base)?).ok()?;
            table.get(off..off.checked_add(n)?)
        };
        let env = CfgEnv {
            is_noreturn: &|t| t % 7 == 0,
            read_data: &read,
            landing_pads: &[],
        };
        let split = len / 2;
        let cfg = Cfg::build(
            &[
                CodeRange {
                    start: base,
                    bytes: &bytes[..split],
                },
                CodeRange {
                    start: base + split as u64 + (next() % 64),
                    bytes: &bytes[split..],
                },
            ],
            &env,
        );
        let forest = LoopForest::build(&cfg);
        check_invariants(&cfg, &forest);
        let line_of = |addr: u64| Some(((addr % 3) as u32, (addr % 97) as u32));
        for i in 0..forest.len() {
            let l = forest.begin_line(&cfg, LoopId(i as u32), &line_of, LOOP_BEGIN_TOLERANCE);
            assert!(l.is_none_or(|l| l.line <= l.anchor_line));
        }
        total_loops += forest.len();
    }
    assert!(
        total_loops > 100,
        "random branches make loops ({total_loops})"
    );
}

#[test]
fn nops_on_a_fall_through_path_are_not_padding() {
    let mut a = Asm::new(0x1000);
    a.label("top")
        .op(INC_ECX)
        .op(CMP_ECX_10)
        .rel8(JE, "out")
        .label("nops")
        .op(&[0x0f, 0x1f, 0x00]) // nopl (%rax), executed when the je is not taken
        .label("body")
        .op(INC_EAX)
        .rel8(JMP8, "top")
        .label("out")
        .op(RET);
    let (cfg, forest) = build(0x1000, &a.finish());
    check_invariants(&cfg, &forest);
    let nops = cfg.block(cfg.block_at(a.addr("nops")).unwrap());
    assert_ne!(nops.terminator, Terminator::Padding);
    assert_eq!(forest.len(), 1);
    assert_eq!(forest.loops[0].blocks.len(), 2, "top and nops+body");
    assert!(!forest.loops[0].irreducible);
}

#[test]
fn branch_over_a_lock_prefix_goes_to_the_containing_instruction() {
    // test edi,edi; je 0x1005 (the `inc` inside `lock inc (%rax)`); lock inc (%rax); ret
    let code = [0x85, 0xff, 0x74, 0x01, 0xf0, 0xff, 0x00, 0xc3];
    let (cfg, forest) = build(0x1000, &code);
    check_invariants(&cfg, &forest);
    assert_eq!(cfg.unresolved_targets, vec![0x1005]);
    let first = cfg.block(cfg.entry.unwrap());
    assert_eq!(first.terminator, Terminator::Branch);
    let targets: Vec<u64> = first.succs.iter().map(|e| cfg.block(e.to).start).collect();
    assert_eq!(targets, vec![0x1004]);
    assert!(forest.is_empty());
}
