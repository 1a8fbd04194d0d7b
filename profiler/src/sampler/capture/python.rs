//! What hpcrun-rs does for Python programs: CPython 3.12 and later calls each Python function
//! through a trampoline of its own, named in `/tmp/perf-PID.map`, when `PYTHONPERFSUPPORT=1`
//! is in its environment; hpcrun-rs sets it for the commands it launches, unwinds through the
//! trampolines (see the unwinding's stubs) and hpcprof-rs puts the Python functions in the
//! calling context. Each Python call then takes a few hundred bytes of native stack, more than
//! the default copy holds for a program a few dozen calls deep: a Python command gets a larger
//! copy unless `--stack-size` says otherwise.

use std::ffi::OsString;
use std::io::Read;
use std::path::Path;

/// The variable that turns CPython's perf trampolines on (3.12 and later; older versions and
/// other programs ignore it).
pub const PERF_SUPPORT: &str = "PYTHONPERFSUPPORT";

/// Bytes of stack copied per sample for a Python command by default: CPython 3.12 takes about
/// 500 bytes of native stack per Python call (measured: a recursion 30 deep needs 16 KiB).
pub const PYTHON_STACK_SIZE: u32 = 32768;

/// The variable to add to a launched command's environment, unless the user set it already
/// (`PYTHONPERFSUPPORT=0` turns the trampolines off and is respected).
pub fn perf_support_env() -> Option<(OsString, OsString)> {
    std::env::var_os(PERF_SUPPORT)
        .is_none()
        .then(|| (PERF_SUPPORT.into(), "1".into()))
}

/// Whether `program` (resolved like `execvp` does) is a Python interpreter, or a script run by
/// one (`#!` naming python).
pub fn is_python(program: &Path) -> bool {
    let real = std::fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf());
    let named = |p: &Path| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("python"))
    };
    if named(program) || named(&real) {
        return true;
    }
    let mut head = [0u8; 128];
    let n = std::fs::File::open(&real)
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    let line = head[..n].split(|&b| b == b'\n').next().unwrap_or_default();
    line.starts_with(b"#!") && line.windows(6).any(|w| w == b"python")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpreters_and_their_scripts_are_python_and_other_programs_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("tool");
        std::fs::write(&script, "#!/usr/bin/env python3\nprint(1)\n").unwrap();
        let shell = dir.path().join("run.sh");
        std::fs::write(&shell, "#!/bin/sh\necho python\n").unwrap();
        assert!(is_python(&script));
        assert!(is_python(Path::new("/usr/local/bin/python3.12")));
        assert!(!is_python(&shell));
        assert!(!is_python(Path::new("/bin/true")));
    }
}
