//! End-to-end tests of what `hpcprof-rs` trusts: its structure cache (damaged entries, a
//! directory others may write) and binaries without a build-id that changed since profiling.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::correlate_prof_common::{hpcprof, measure};
use crate::support::{compile, scratch_dir};
use correlate::Database;
use object::{Object, ObjectSection, ObjectSymbol};
use profiler::db::Profile;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Correlate `profile` into `dir/NAME.hpcdb` with `args`; the database and stderr.
fn correlate_as(dir: &Path, profile: &Path, name: &str, args: &[&str]) -> (Database, String) {
    let out = dir.join(format!("{name}.hpcdb"));
    let mut all = vec!["-o", out.to_str().unwrap()];
    all.extend_from_slice(args);
    let o = hpcprof(dir, &[profile], &all);
    assert!(o.status.success(), "{name}: {}", stderr(&o));
    (Database::read(&out).expect("database"), stderr(&o))
}

/// The structure cache's entries under `dir/cache`.
fn cache_dir(dir: &Path) -> PathBuf {
    dir.join("cache/hpctoolkit-rs/structure")
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = std::fs::read_dir(cache_dir(dir))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    all.sort();
    all
}

/// A measured fixture in a fresh directory: (dir, binary, profile).
fn measured(test: &str, flags: &[&str]) -> (PathBuf, PathBuf, PathBuf) {
    let dir = scratch_dir(test);
    let mut all = vec!["-O2", "-g"];
    all.extend_from_slice(flags);
    let bin = compile("prof_callers.c", &dir, "app", &all);
    let profile = measure(&bin, &["20000000"], &dir, "app");
    (dir, bin, profile)
}

#[test]
fn a_damaged_cache_entry_is_rebuilt_with_one_warning_and_the_same_result() {
    let (dir, _, profile) = measured("correlate-integrity-damaged-cache", &[]);
    let (expected, _) = correlate_as(&dir, &profile, "uncached", &["--no-cache"]);
    correlate_as(&dir, &profile, "fills", &[]);
    let entry = entries(&dir)
        .into_iter()
        .max_by_key(|e| std::fs::metadata(e).unwrap().len())
        .expect("a cache entry");
    let len = std::fs::metadata(&entry).unwrap().len() as usize;
    for (round, offset) in [12, 15, 16, 17, 40, len / 3, len / 2, len - 1]
        .into_iter()
        .enumerate()
    {
        let mut bytes = std::fs::read(&entry).unwrap();
        bytes[offset] ^= 0x5a;
        std::fs::write(&entry, &bytes).unwrap();
        let (db, err) = correlate_as(&dir, &profile, &format!("damaged{round}"), &[]);
        assert_eq!(db.nodes, expected.nodes, "offset {offset}: other numbers");
        let ids = |db: &Database| -> Vec<_> {
            let id = |m: &correlate::ModuleDesc| (m.path.clone(), m.build_id.clone());
            db.modules.iter().map(id).collect()
        };
        assert_eq!(ids(&db), ids(&expected), "offset {offset}: other modules");
        let warned = err.matches("damaged structure cache entry").count();
        assert_eq!(warned, 1, "offset {offset}: warned {warned} times:\n{err}");
        let (_, again) = correlate_as(&dir, &profile, &format!("again{round}"), &[]);
        assert!(!again.contains("damaged structure"), "rebuilt: {again}");
    }
}

#[test]
fn a_cache_directory_others_may_write_is_not_used() {
    let (dir, _, profile) = measured("correlate-integrity-open-cache", &[]);
    std::fs::create_dir_all(cache_dir(&dir)).unwrap();
    std::fs::set_permissions(cache_dir(&dir), std::fs::Permissions::from_mode(0o777)).unwrap();
    let (_, err) = correlate_as(&dir, &profile, "open", &[]);
    assert_eq!(
        err.matches("writable by group or others").count(),
        1,
        "{err}"
    );
    assert!(entries(&dir).is_empty(), "nothing stored in it");
    assert!(err.contains("cache 0"), "nothing read from it: {err}");
}

/// The file offset of function `name` in the ELF file `bin`.
fn file_offset_of(bin: &Path, name: &str) -> usize {
    let data = std::fs::read(bin).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let sym = obj.symbols().find(|s| s.name() == Ok(name)).unwrap();
    let text = obj.section_by_name(".text").unwrap();
    let (text_offset, _) = text.file_range().unwrap();
    (sym.address() - text.address() + text_offset) as usize
}

#[test]
fn a_binary_without_build_id_changed_with_size_and_time_kept_is_refused() {
    let (dir, bin, profile) = measured("correlate-integrity-stale", &["-Wl,--build-id=none"]);
    let recorded = Profile::read(&profile).unwrap();
    let app = recorded
        .modules
        .iter()
        .find(|m| m.path == bin.to_str().unwrap());
    let app = app.expect("the fixture is a module");
    assert_eq!(app.build_id, None);
    assert!(
        app.checksum.is_some(),
        "a checksum stands in for the build-id"
    );
    let (fresh, err) = correlate_as(&dir, &profile, "fresh", &[]);
    assert!(!err.contains("changed"), "{err}");

    // Another build of the same size, with the old time (as `cp -p` or `rsync -a` leave it).
    let original = dir.join("app.orig");
    std::fs::copy(&bin, &original).unwrap();
    let mut bytes = std::fs::read(&bin).unwrap();
    bytes[file_offset_of(&bin, "caller_b") + 1] ^= 0x01;
    std::fs::write(&bin, &bytes).unwrap();
    let touched = std::process::Command::new("touch")
        .arg("-r")
        .arg(&original)
        .arg(&bin)
        .status()
        .unwrap();
    assert!(touched.success());

    let (stale, err) = correlate_as(&dir, &profile, "stale", &[]);
    assert!(
        err.contains("the binary changed since it was profiled (its contents differ, and it has no build-id)"),
        "{err}"
    );
    let module = |db: &Database| {
        db.modules
            .iter()
            .find(|m| m.path == bin.to_str().unwrap())
            .map(|m| m.structure.clone())
            .unwrap()
    };
    assert!(matches!(
        module(&fresh),
        correlate::StructureSource::Cache | correlate::StructureSource::OnTheFly
    ));
    assert!(
        matches!(module(&stale), correlate::StructureSource::None(_)),
        "not attributed with the old structure: {:?}",
        module(&stale)
    );
}

#[test]
fn a_binary_without_build_id_is_read_once_when_its_structure_is_cached() {
    // Its build-id, symbols and content checksum all come from one read of the file.
    let (dir, bin, profile) = measured("correlate-integrity-read-once", &["-Wl,--build-id=none"]);
    correlate_as(&dir, &profile, "fills", &[]);
    let trace = dir.join("openat.trace");
    let out = dir.join("warm.hpcdb");
    let traced = std::process::Command::new("strace")
        .args(["-f", "-e", "trace=openat", "-o"])
        .arg(&trace)
        .arg(crate::support::tool("hpcprof-rs"))
        .arg(&profile)
        .arg("-o")
        .arg(&out)
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .output()
        .expect("strace runs");
    assert!(traced.status.success(), "{}", stderr(&traced));
    let opened = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .filter(|l| l.contains(&format!("\"{}\"", bin.display())) && !l.contains("= -1"))
        .count();
    assert_eq!(opened, 1, "times {} was opened", bin.display());
}

#[test]
fn a_structure_file_of_a_rebuild_that_only_moved_lines_is_refused() {
    for (variant, flags) in [
        ("build-id", &[][..]),
        ("no-build-id", &["-Wl,--build-id=none"][..]),
    ] {
        let (dir, bin, _) = measured(&format!("correlate-integrity-moved-{variant}"), flags);
        let structure = dir.join("app.hpcstruct");
        let out = crate::support::tool_command("hpcstruct-rs")
            .arg(&bin)
            .arg("-o")
            .arg(&structure)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        // The same code three lines further down: every function keeps its address and size.
        let source = std::fs::read_to_string(crate::support::fixture("prof_callers.c")).unwrap();
        let moved = dir.join("moved.c");
        std::fs::write(&moved, format!("\n\n\n{source}")).unwrap();
        let before = symbols_of(&bin);
        let mut all = vec!["-O2", "-g"];
        all.extend_from_slice(flags);
        compile(moved.to_str().unwrap(), &dir, "app", &all);
        assert_eq!(symbols_of(&bin), before, "{variant}: only lines moved");
        let profile = measure(&bin, &["20000000"], &dir, "rebuilt");

        let out = dir.join("stale.hpcdb");
        let o = hpcprof(
            &dir,
            &[&profile, &structure],
            &["-o", out.to_str().unwrap()],
        );
        let err = stderr(&o);
        assert!(
            !o.status.success(),
            "{variant}: the stale structure file was used: {err}"
        );
        assert!(
            err.contains("describes another build of") && err.contains("run hpcstruct-rs"),
            "{variant}: {err}"
        );
    }
}

/// Function symbols of `bin`: (name, address, size), sorted.
fn symbols_of(bin: &Path) -> Vec<(String, u64, u64)> {
    let data = std::fs::read(bin).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let mut all: Vec<_> = obj
        .symbols()
        .filter(|s| s.kind() == object::SymbolKind::Text)
        .map(|s| (s.name().unwrap_or("").to_string(), s.address(), s.size()))
        .collect();
    all.sort();
    all
}
