//! Focused analysis agrees with whole-module analysis: for a few hundred addresses of real
//! binaries (an `-O3 -g` C++ program, this machine's libc with its separate debug file, and
//! libstdc++ without DWARF), `lookup` and the walk up to the procedure (procedure, inlined
//! calls with their call sites, loops with their headers, the statement's line) are identical
//! in the tree of `analyze_focused` and in the tree of `analyze_file`.

use std::path::{Path, PathBuf};

use crate::structure_support::{assert_focused_agrees, context};
use crate::support::{compile, scratch_dir};
use profiler::addr::Svma;
use structure::line_table_addresses;
use structure::{analyze_file, analyze_focused, Coverage, Options, ScopeTree};

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }

    fn pick<T: Clone>(&mut self, from: &[T], n: usize) -> Vec<T> {
        (0..n)
            .filter_map(|_| from.get(self.below(from.len() as u64) as usize).cloned())
            .collect()
    }
}

/// Addresses to check in `binary`, whose whole-module tree is `full`: line-table rows, points
/// inside statements (as samples land), return-address-like points (the byte before a
/// statement's end) and uniform addresses over the procedures' span (gaps included).
fn addresses(binary: &Path, full: &ScopeTree, seed: u64, n: usize) -> Vec<Svma> {
    let mut rng = Rng(seed);
    let mut out = rng.pick(&line_table_addresses(binary).unwrap(), n);
    let index = full.address_index();
    for &(start, end, _) in &rng.pick(index, n) {
        out.push(Svma(start + rng.below(end - start)));
        out.push(Svma(end - 1));
    }
    if let (Some(first), Some(last)) = (index.first(), index.last()) {
        out.extend((0..n / 2).map(|_| Svma(first.0 + rng.below(last.1 - first.0))));
    }
    out
}

/// Analyse `binary` whole and focused on `n`-ish addresses; assert they agree on each, and
/// that the focused tree is smaller and covers every asked address.
fn assert_agree(binary: &Path, seed: u64, n: usize) {
    let full = analyze_file(binary, &Options::default()).unwrap();
    assert_eq!(full.coverage, Coverage::Module);
    let asked = addresses(binary, &full.tree, seed, n);
    let (focused, resolved) = assert_focused_agrees(binary, &full, &asked);
    assert!(
        resolved * 2 > asked.len(),
        "{}: only {resolved} of {} addresses resolve; the check would be vacuous",
        binary.display(),
        asked.len()
    );
    let procedures = |t: &ScopeTree| t.procedures().count();
    assert!(
        procedures(&focused.tree) < procedures(&full.tree),
        "{}: focused analysis built {} procedures, full {}",
        binary.display(),
        procedures(&focused.tree),
        procedures(&full.tree)
    );
    // Everything the focused tree covers, not only the asked addresses, answers the same.
    let Coverage::Ranges(covered) = &focused.coverage else {
        panic!("a focused analysis covers ranges");
    };
    let mut rng = Rng(seed ^ 0x5eed);
    for r in rng.pick(covered, n / 4) {
        let a = Svma(r.start + rng.below(r.end - r.start));
        assert_eq!(context(&focused.tree, a), context(&full.tree, a), "{a:#x}");
    }
}

/// The first of `candidates` that exists.
fn system_library(candidates: &[&str]) -> Option<PathBuf> {
    candidates.iter().map(PathBuf::from).find(|p| p.is_file())
}

#[test]
fn focused_agrees_on_an_o3_cpp_program() {
    let dir = scratch_dir("structure_focus_stlmap");
    let bin = compile("stlmap.cc", &dir, "stlmap", &["-O3", "-g"]);
    assert_agree(&bin, 0x1234_5678_9abc_def1, 300);
}

#[test]
fn focused_agrees_on_libc() {
    let Some(libc) = system_library(&[
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
    ]) else {
        eprintln!("no libc.so.6 found; skipped");
        return;
    };
    assert_agree(&libc, 0x0dd_ba11_cafe_f00d, 300);
}

#[test]
fn focused_agrees_on_libstdcxx_without_dwarf() {
    let Some(lib) = system_library(&["/usr/lib/x86_64-linux-gnu/libstdc++.so.6"]) else {
        eprintln!("no libstdc++.so.6 found; skipped");
        return;
    };
    assert_agree(&lib, 0xfeed_beef_1357_9bdf, 300);
}

#[test]
fn focus_on_nothing_builds_nothing_and_bad_files_are_named() {
    let dir = scratch_dir("structure_focus_edges");
    let bin = compile("stlmap.cc", &dir, "stlmap", &["-O2", "-g"]);
    let empty = analyze_focused(&bin, &[], &Options::default()).unwrap();
    assert_eq!(empty.tree.procedures().count(), 0);
    assert_eq!(empty.coverage, Coverage::Ranges(Vec::new()));
    assert!(!empty.coverage.covers(Svma(0x1000)));

    let text = dir.join("not-elf");
    std::fs::write(&text, "plain text, not a binary").unwrap();
    let err = analyze_focused(&text, &[Svma(0x1000)], &Options::default())
        .err()
        .expect("a text file is not analysed");
    assert!(err.to_string().contains("not-elf"), "{err}");
}
