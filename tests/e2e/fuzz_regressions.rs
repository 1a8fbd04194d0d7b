//! The permanent fuzzing net: every input in `tests/fuzz-regressions/TARGET/` (what the fuzzers
//! found, and chosen seeds) goes through the same entry point as that target's harness, which
//! must return normally, quickly: a clean error or a result, never a panic or a hang.

#[path = "../../fuzz/src/lib.rs"]
mod targets;

use crate::support::{scratch_dir, workspace_root};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Longer than this on one small input is a hang (the fuzzers allow 1 s in a release build).
const PATIENCE: Duration = Duration::from_secs(20);

fn inputs(target: &str) -> Vec<PathBuf> {
    let dir = workspace_root().join("tests/fuzz-regressions").join(target);
    let mut all: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    all.sort();
    all
}

/// A target's entry point, as its harness calls it.
type Replay<'a> = &'a dyn Fn(&[u8]);

#[test]
fn every_regression_input_gives_an_error_or_a_result() {
    let scratch = scratch_dir("fuzz_regressions").join("input.elf");
    let targets: [(&str, Replay); 4] = [
        ("profile_db", &targets::profile_db),
        ("hpcdb", &targets::hpcdb),
        ("structure_xml", &targets::structure_xml),
        ("elf_structure", &|b| targets::elf_structure(b, &scratch)),
    ];
    let mut failures = Vec::new();
    for (target, replay) in targets {
        let files = inputs(target);
        assert!(!files.is_empty(), "no regression inputs for {target}");
        for file in files {
            let bytes = std::fs::read(&file).unwrap();
            let started = Instant::now();
            if catch_unwind(AssertUnwindSafe(|| replay(&bytes))).is_err() {
                failures.push(format!("{}: panicked", file.display()));
            } else if started.elapsed() > PATIENCE {
                failures.push(format!("{}: took {:?}", file.display(), started.elapsed()));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
