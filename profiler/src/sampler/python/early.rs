//! A launched Python command registered with the frame reader as soon as its interpreter is
//! mapped. The recorder learns of the mapping late (the rings wake it when half full, tens of
//! milliseconds on), while the interpreter runs Python within milliseconds of being mapped:
//! a thread watches the process's mappings from its `exec` until then.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::sampler::python::collector::Shared;
use crate::sampler::python::layout::{layout_of, Interpreter, Reading, CONFIG_SIZE};

/// How long a launched command may take to map its interpreter.
const PATIENCE: Duration = Duration::from_secs(10);

/// Watch process `pid` (launched, not yet exec'd) until it maps a CPython interpreter, and
/// register it with the frame reader (`shared`) then.
pub(crate) fn watch(pid: u32, shared: std::sync::Arc<Shared>) {
    let spawned = std::thread::Builder::new()
        .name("hpcrun-python".into())
        .spawn(move || {
            let until = Instant::now() + PATIENCE;
            // Files read already that hold no interpreter (`python3.12` linked to its library).
            let mut tried = HashSet::new();
            // Before its `exec` the held child's mappings may not be readable.
            while Instant::now() < until && Path::new(&format!("/proc/{pid}")).exists() {
                let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"));
                if let Some((config, reading)) =
                    maps.ok().and_then(|m| interpreter_config(&m, &mut tried))
                {
                    shared.register(pid, &config, reading);
                    return;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
    // Without the thread, the recorder registers it when it reads the mapping.
    drop(spawned);
}

/// The frame reader's config for the first CPython interpreter of a known version in `maps`
/// (the text of `/proc/PID/maps`), and how to read its code objects, not reading again the
/// files in `tried`.
fn interpreter_config(
    maps: &str,
    tried: &mut HashSet<String>,
) -> Option<([u8; CONFIG_SIZE], Reading)> {
    exec_mappings(maps).find_map(|(start, pgoff, path)| {
        if layout_of(path).is_none() || !tried.insert(path.to_string()) {
            return None;
        }
        let interpreter = Interpreter::in_file(path)?;
        let bias = interpreter.bias(start, pgoff)?;
        Some((interpreter.config(bias), interpreter.reading(bias)))
    })
}

/// The executable file mappings of `maps` (the text of `/proc/PID/maps`): (start, file
/// offset, path).
pub(crate) fn exec_mappings(maps: &str) -> impl Iterator<Item = (u64, u64, &str)> {
    maps.lines().filter_map(|line| {
        let mut fields = line.split_whitespace();
        let range = fields.next()?;
        let perms = fields.next()?;
        let offset = fields.next()?;
        let path = fields.nth(2)?;
        let start = u64::from_str_radix(range.split('-').next()?, 16).ok()?;
        let pgoff = u64::from_str_radix(offset, 16).ok()?;
        perms.contains('x').then_some((start, pgoff, path))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_executable_file_mappings_are_listed() {
        let maps = "\
55d0c8a00000-55d0c8a01000 r--p 00000000 08:01 123 /usr/bin/python3.12
7f0000001000-7f0000002000 r-xp 00106000 08:01 456 /usr/lib/libpython3.12.so.1.0
7f0000003000-7f0000004000 rw-p 00000000 00:00 0
7ffd00000000-7ffd00001000 r-xp 00000000 00:00 0 [vdso]
";
        let got: Vec<_> = exec_mappings(maps).collect();
        assert_eq!(
            got,
            [
                (0x7f00_0000_1000, 0x106000, "/usr/lib/libpython3.12.so.1.0"),
                (0x7ffd_0000_0000, 0, "[vdso]")
            ]
        );
    }
}
