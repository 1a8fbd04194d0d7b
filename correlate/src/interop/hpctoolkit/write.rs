//! Writing a database directory: refuse what is not ours, copy the source files into `src/`,
//! then put each file in place atomically (`meta.db` last, so a directory whose writing failed
//! reads as incomplete).

use std::fs;
use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use profiler::envelope::{read_file, write_atomically, Replace};

use super::meta::{meta_db, DESCRIPTION};
use super::trace::trace_db;
use super::values::{cct_db, planes, profile_db};
use super::{Experiment, HpctoolkitError, ENTRIES};

/// Source files larger than this are not copied (they keep their path).
const MAX_SOURCE_BYTES: u64 = 16 << 20;

/// Write `ex`, and the metric taxonomy `taxonomy`, into directory `dir` (see
/// [`super::write_database`]).
pub(crate) fn write_dir(
    mut ex: Experiment,
    dir: &Path,
    taxonomy: &str,
) -> Result<(), HpctoolkitError> {
    prepare(dir)?;
    copy_sources(&mut ex, dir)?;
    let planes = planes(&ex);
    let trace = dir.join("trace.db");
    match trace_db(&ex) {
        Some(bytes) => write_atomically(&trace, &bytes, Replace::Allowed)?,
        None => remove_entry(&trace)?,
    }
    let files = [
        ("profile.db", profile_db(&ex, &planes)),
        ("cct.db", cct_db(&ex, &planes)),
        ("meta.db", meta_db(&ex)),
    ];
    for (name, bytes) in files {
        write_atomically(&dir.join(name), &bytes, Replace::Allowed)?;
    }
    let metrics = dir.join("metrics");
    own_directory(&metrics)?;
    write_atomically(
        &metrics.join("default.yaml"),
        taxonomy.as_bytes(),
        Replace::Allowed,
    )?;
    Ok(())
}

/// The error refusing `dir` for a reason.
fn refused_at(dir: &Path) -> impl Fn(&'static str) -> HpctoolkitError + Copy + '_ {
    |why| HpctoolkitError::Refused {
        path: dir.to_path_buf(),
        why,
    }
}

/// The error of an I/O operation on `dir`.
fn io_at(dir: &Path) -> impl Fn(std::io::Error) -> HpctoolkitError + Copy + '_ {
    |source| HpctoolkitError::Io {
        path: dir.to_path_buf(),
        source,
    }
}

/// Make `dir` a directory of its own: created where missing, refused where it is a symlink or
/// another kind of file.
fn own_directory(dir: &Path) -> Result<(), HpctoolkitError> {
    let (refused, io) = (refused_at(dir), io_at(dir));
    match fs::symlink_metadata(dir) {
        Err(e) if e.kind() == ErrorKind::NotFound => fs::create_dir(dir).map_err(io),
        Err(e) => Err(io(e)),
        Ok(m) if m.file_type().is_symlink() => Err(refused(
            "is a symbolic link; give the database's own directory",
        )),
        Ok(m) if !m.is_dir() => Err(refused("exists and is not a directory")),
        Ok(_) => Ok(()),
    }
}

/// Copy each source file that can be read into `dir/src/` under its absolute path and refer to
/// the copy by its path relative to `dir` (which `meta.db` flags as copied, as HPCToolkit's
/// `hpcprof` does), so the database shows its sources on another machine. A previous `src/` is
/// replaced; a file that cannot be read keeps its path.
fn copy_sources(ex: &mut Experiment, dir: &Path) -> Result<(), HpctoolkitError> {
    let src = dir.join("src");
    remove_entry(&src)?;
    for (i, path) in ex.files.iter_mut().enumerate() {
        let Some(name) = copy_name(path) else {
            continue;
        };
        let readable =
            fs::metadata(&*path).is_ok_and(|m| m.is_file() && m.len() <= MAX_SOURCE_BYTES);
        let Some(bytes) = readable.then(|| read_file(Path::new(path)).ok()).flatten() else {
            continue;
        };
        let copy = src.join(&name);
        let parent = copy.parent().unwrap_or(&src);
        fs::create_dir_all(parent).map_err(|source| HpctoolkitError::Io {
            path: parent.to_path_buf(),
            source,
        })?;
        write_atomically(&copy, &bytes, Replace::Refused)?;
        *path = Path::new("src").join(name).display().to_string();
        ex.copied.insert(i);
    }
    Ok(())
}

/// The path under `src/` of the copy of the source file at `path`: its components below the
/// root; `None` for a relative path or one with `..` in it (never copied).
fn copy_name(path: &str) -> Option<PathBuf> {
    let mut components = Path::new(path).components();
    if components.next() != Some(Component::RootDir) {
        return None;
    }
    let name: Option<PathBuf> = components
        .map(|c| match c {
            Component::Normal(part) => Some(part),
            _ => None,
        })
        .collect();
    name.filter(|n| n.components().next().is_some())
}

/// Remove the directory entry `path` if there is one: a directory with what it holds, anything
/// else (a symlink included) as an entry, never following a link.
fn remove_entry(path: &Path) -> Result<(), HpctoolkitError> {
    let removed = match fs::symlink_metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
    };
    removed.map_err(|source| HpctoolkitError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Create `dir`, or accept it if it is a directory (not a symlink) that is empty or holds only
/// a database this tool wrote.
fn prepare(dir: &Path) -> Result<(), HpctoolkitError> {
    let (refused, io) = (refused_at(dir), io_at(dir));
    own_directory(dir)?;
    for entry in fs::read_dir(dir).map_err(io)? {
        let name = entry.map_err(io)?.file_name();
        if !ENTRIES.iter().any(|f| name == *f) {
            return Err(refused(
                "exists and holds other files than an hpcprof-rs HPCToolkit database; \
                 remove it or choose another output",
            ));
        }
    }
    // `src/` is replaced whole: only where our `meta.db` says the directory is ours.
    let meta = dir.join("meta.db");
    let ours = written_by_us(&meta);
    if (meta.exists() || fs::symlink_metadata(dir.join("src")).is_ok()) && !ours {
        return Err(refused(
            "holds an HPCToolkit database that hpcprof-rs did not write; \
             remove it or choose another output",
        ));
    }
    Ok(())
}

/// Whether the `meta.db` at `path` carries the description this tool writes.
fn written_by_us(path: &Path) -> bool {
    read_file(path).is_ok_and(|b| {
        b.starts_with(b"HPCTOOLKITmeta")
            && b.windows(DESCRIPTION.len())
                .any(|w| w == DESCRIPTION.as_bytes())
    })
}

#[cfg(test)]
mod tests {
    use super::copy_name;
    use std::path::PathBuf;

    #[test]
    fn only_plain_absolute_paths_are_copied_below_src() {
        assert_eq!(copy_name("/home/a/x.c"), Some(PathBuf::from("home/a/x.c")));
        assert_eq!(copy_name("/home/./x.c"), Some(PathBuf::from("home/x.c")));
        for refused in ["x.c", "./x.c", "/home/../etc/passwd", "/", ""] {
            assert_eq!(copy_name(refused), None, "{refused}");
        }
    }
}
