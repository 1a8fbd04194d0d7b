//! Damaged inputs: a binary with one corrupt DWARF unit among two still yields the other
//! unit's procedures with lines and inlining (and the damaged unit's code, with lines, from
//! its line table); truncated and scribbled-over binaries give a result or a clean error,
//! never a panic.

use crate::support::{compile_all, marker, run, scratch_dir, tool, tool_command};
use profiler::addr::Svma;
use std::path::{Path, PathBuf};
use std::process::Command;
use structure::{analyze_file, read_structure_file, Options, ScopeId, ScopeKind, ScopeTree};

fn readelf(args: &[&str], file: &Path) -> String {
    let out = run(Command::new("readelf").args(args).arg(file));
    assert!(out.status.success(), "readelf {args:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// File offset of section `name` (from `readelf -S -W`).
fn section_offset(file: &Path, name: &str) -> usize {
    let table = readelf(&["-S", "-W"], file);
    let line = table
        .lines()
        .find(|l| l.split_whitespace().any(|w| w == name))
        .unwrap_or_else(|| panic!("no section {name}"));
    // "[Nr] Name Type Address Off Size ...": the offset follows the address.
    let words: Vec<&str> = line.split(']').nth(1).unwrap().split_whitespace().collect();
    usize::from_str_radix(words[3], 16).unwrap()
}

/// Where the unit compiled from `source` sits in `.debug_info`: (unit offset, offset of the
/// DIE of its procedure `proc_`), both relative to the section.
fn unit_of(file: &Path, source: &str, proc_: &str) -> (usize, usize) {
    let dump = readelf(&["--debug-dump=info"], file);
    let hex = |s: &str| usize::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    let mut unit = None;
    let mut found_unit = None;
    let mut die = None;
    let mut last_die = 0;
    for line in dump.lines() {
        if let Some(rest) = line.trim().strip_prefix("Compilation Unit @ offset ") {
            unit = Some(hex(rest.trim_end_matches(':')));
        } else if let Some((_, rest)) = line.trim().split_once("><") {
            last_die = hex(rest.split('>').next().unwrap());
        } else if line.contains("DW_AT_name") && line.trim_end().ends_with(source) {
            found_unit = unit;
        } else if found_unit.is_some()
            && die.is_none()
            && line.contains("DW_AT_name")
            && line.trim_end().ends_with(&format!(": {proc_}"))
        {
            die = Some(last_die);
        }
    }
    (found_unit.expect("unit"), die.expect("procedure DIE"))
}

fn procedure(tree: &ScopeTree, name: &str) -> ScopeId {
    tree.procedures()
        .find(|&p| &*tree.get(p).name == name)
        .unwrap_or_else(|| panic!("no procedure {name}"))
}

fn lines_below(tree: &ScopeTree, scope: ScopeId, kind: ScopeKind) -> Vec<u32> {
    tree.descendants(scope)
        .into_iter()
        .filter(|&d| tree.get(d).kind == kind)
        .map(|d| tree.get(d).line)
        .collect()
}

fn two_units(dir: &Path) -> PathBuf {
    let units = ["struct_units_main.c", "struct_units_work.c"];
    compile_all(&units, dir, "units", &["-O2", "-g"])
}

#[test]
fn a_corrupt_unit_is_skipped_and_the_other_recovered() {
    let dir = scratch_dir("structure_corrupt_unit");
    let good = two_units(&dir);
    let bytes = std::fs::read(&good).unwrap();
    let info = section_offset(&good, ".debug_info");
    let (unit, work_die) = unit_of(&good, "struct_units_work.c", "work");
    // DWARF 5, 32-bit: the root DIE follows a 12-byte unit header.
    let corruptions: [(&str, usize, &[u8], &str); 3] = [
        (
            "root DIE abbreviation",
            unit + 12,
            &[0x7e],
            "DWARF unit at .debug_info+",
        ),
        (
            "procedure DIE abbreviation",
            work_die,
            &[0x7e],
            "DWARF unit at .debug_info+",
        ),
        (
            "unit length",
            unit,
            &[0xf0, 0xff, 0xff, 0xff],
            "unit headers unreadable",
        ),
    ];
    for (what, at, patch, message) in corruptions {
        let mut damaged = bytes.clone();
        damaged[info + at..info + at + patch.len()].copy_from_slice(patch);
        let path = dir.join("damaged");
        std::fs::write(&path, &damaged).unwrap();
        let out = run(tool_command("hpcstruct-rs")
            .arg(&path)
            .args(["-o", "damaged.hpcstruct"])
            .current_dir(&dir));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{what}: {stderr}");
        assert!(
            stderr.contains("skipped") && stderr.contains(message),
            "{what}: the skipped unit is reported: {stderr}"
        );
        if message.ends_with('+') {
            assert!(stderr.contains(&format!("+{unit:#x}")), "{what}: {stderr}");
        }
        let tree = &read_structure_file(&dir.join("damaged.hpcstruct")).unwrap()[0];

        // Focused analysis treats the damaged unit as the whole-module analysis does.
        let full = analyze_file(&path, &Options::default()).unwrap();
        let starts: Vec<Svma> = full
            .tree
            .address_index()
            .iter()
            .map(|r| Svma(r.0))
            .collect();
        let (_, resolved) = crate::structure_support::assert_focused_agrees(&path, &full, &starts);
        assert_eq!(resolved, starts.len(), "{what}");

        // The intact unit: procedures, lines, loops and inline records as compiled.
        let main = procedure(tree, "main");
        let fill = marker("struct_units_main.c", "main_fill");
        assert!(
            lines_below(tree, main, ScopeKind::Loop).contains(&fill),
            "{what}"
        );
        assert!(
            tree.descendants(main)
                .iter()
                .any(|&d| tree.get(d).is_alien() && &*tree.get(d).name == "total"),
            "{what}: main's inline record for total"
        );

        // The damaged unit: its procedure from the symbol table, its lines from its line
        // program read without the unit, its loops from the code.
        let work = procedure(tree, "work");
        let stmts = lines_below(tree, work, ScopeKind::Statement);
        assert!(
            stmts.iter().filter(|&&l| l > 0).count() >= 3,
            "{what}: {stmts:?}"
        );
        let loops = lines_below(tree, work, ScopeKind::Loop);
        let inner = marker("struct_units_work.c", "work_inner");
        assert!(
            loops.iter().any(|&l| l.abs_diff(inner) <= 1),
            "{what}: {loops:?}"
        );
    }
}

/// A tiny deterministic generator (xorshift) for the scribbles.
struct Scribbler(u64);

impl Scribbler {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn truncated_and_scribbled_binaries_never_panic() {
    let dir = scratch_dir("structure_fuzzish");
    let good = two_units(&dir);
    let bytes = std::fs::read(&good).unwrap();
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    for len in [
        0,
        4,
        16,
        63,
        64,
        200,
        1000,
        bytes.len() / 2,
        bytes.len() - 1,
    ] {
        cases.push((format!("truncated to {len}"), bytes[..len].to_vec()));
    }
    let mut rng = Scribbler(0x9e37_79b9_7f4a_7c15);
    let sections = [
        ".debug_info",
        ".debug_abbrev",
        ".debug_line",
        ".debug_str",
        ".text",
    ];
    let mut targets: Vec<(String, usize)> = sections
        .iter()
        .map(|s| (s.to_string(), section_offset(&good, s)))
        .collect();
    targets.push(("ELF header".into(), 0));
    targets.push(("program headers".into(), 64));
    let shoff = u64::from_le_bytes(bytes[0x28..0x30].try_into().unwrap()) as usize;
    targets.push(("section headers".into(), shoff));
    for (name, base) in &targets {
        for round in 0..4 {
            let mut damaged = bytes.clone();
            let start = base + (rng.next() % 96) as usize;
            let len = 1 + (rng.next() % 16) as usize;
            for b in damaged.iter_mut().skip(start).take(len) {
                *b = rng.next() as u8;
            }
            cases.push((
                format!("{name} +{start:#x} x{len} (round {round})"),
                damaged,
            ));
        }
    }
    assert!(cases.len() >= 40);
    let path = dir.join("case");
    let mut results = (0, 0);
    for (what, data) in &cases {
        std::fs::write(&path, data).unwrap();
        let outcome = std::panic::catch_unwind(|| analyze_file(&path, &Options::default()));
        match outcome {
            Ok(Ok(_)) => results.0 += 1,
            Ok(Err(e)) => {
                let message = e.to_string();
                assert!(
                    message.contains("case"),
                    "{what}: error names the file: {message}"
                );
                results.1 += 1;
            }
            Err(_) => panic!("{what}: the analysis panicked"),
        }
    }
    // Truncated headers cannot be analysed; most scribbles in DWARF or code still can.
    assert!(results.0 > 0 && results.1 > 0, "{results:?}");
}

/// `dir/name`: a small C program compiled with `-g -gz` (its DWARF sections zlib-compressed),
/// with `patch` applied to the bytes of its `.debug_info` section (its `Elf64_Chdr` first).
fn compressed_debug_info(dir: &Path, name: &str, patch: impl Fn(&mut [u8])) -> PathBuf {
    let good = compile_all(
        &["struct_units_main.c", "struct_units_work.c"],
        dir,
        "gz",
        &["-g", "-gz"],
    );
    let mut bytes = std::fs::read(&good).unwrap();
    let offset = section_offset(&good, ".debug_info");
    let chdr = &bytes[offset..offset + 4];
    assert_eq!(
        chdr,
        1u32.to_le_bytes(),
        "-gz compressed .debug_info with zlib"
    );
    patch(&mut bytes[offset..]);
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Run hpcstruct-rs on `binary` under `/usr/bin/time`: (success, stderr, peak RSS in KiB).
fn hpcstruct_measured(binary: &Path) -> (bool, String, u64) {
    let out = run(Command::new("/usr/bin/time")
        .args(["-f", "peak-rss-kib %M"])
        .arg(tool("hpcstruct-rs"))
        .arg(binary)
        .arg("-o")
        .arg(binary.with_extension("hpcstruct")));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let rss = stderr
        .lines()
        .find_map(|l| l.strip_prefix("peak-rss-kib "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS in:\n{stderr}"));
    (out.status.success(), stderr, rss)
}

/// A compressed `.debug_info` whose header claims 4 GiB (a decompression bomb: a few KiB
/// claiming gigabytes) is not decompressed: it is reported by name and claimed size, and the
/// analysis finishes without it in bounded memory. Before, it took 4.2 GB.
#[test]
fn a_compressed_section_claiming_gigabytes_is_skipped_and_reported() {
    let dir = scratch_dir("structure-decompression-bomb");
    let claimed: u64 = 4 << 30;
    let bomb = compressed_debug_info(&dir, "bomb.o", |section| {
        section[8..16].copy_from_slice(&claimed.to_le_bytes());
    });
    let (ok, stderr, rss_kib) = hpcstruct_measured(&bomb);
    assert!(ok, "{stderr}");
    let report = stderr.lines().find(|l| l.contains("section .debug_info"));
    assert!(
        report.is_some_and(|l| l.contains(&claimed.to_string()) && l.contains("skipped")),
        "no report of the skipped section:\n{stderr}"
    );
    assert!(rss_kib < 200 * 1024, "peak RSS {rss_kib} KiB:\n{stderr}");
}

/// A compressed `.debug_info` whose data does not decompress is reported, not silently
/// dropped.
#[test]
fn a_compressed_section_that_does_not_decompress_is_reported() {
    let dir = scratch_dir("structure-corrupt-compressed");
    let corrupt = compressed_debug_info(&dir, "corrupt.o", |section| {
        // The zlib stream follows the 24-byte header: break its header and first block.
        section[24..40].fill(0xff);
    });
    let (ok, stderr, _) = hpcstruct_measured(&corrupt);
    assert!(ok, "{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("section .debug_info") && l.contains("unreadable")),
        "no report of the undecompressable section:\n{stderr}"
    );
}
