//! `/proc/PID/maps`, read in one place: the loader's map of a process (what was mapped before
//! sampling began), the allocator's module for uprobes, the watcher's stacks and code, and our
//! own `[vdso]` all take their lines from here.
//!
//! A line is `START-END PERMS OFFSET DEV INODE` and, after padding, the path, which runs to the
//! end of the line: it may hold spaces, and the kernel appends ` (deleted)` to a file that was
//! unlinked while mapped.

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MapsLine<'a> {
    /// First address.
    pub(crate) start: u64,
    /// One past the last address.
    pub(crate) end: u64,
    /// The four permission letters, e.g. `r-xp`.
    pub(crate) perms: &'a str,
    /// File offset of the first byte.
    pub(crate) offset: u64,
    /// The mapped file or pseudo-name (`[heap]`, `[vdso]`, `/memfd:x (deleted)`); empty for an
    /// anonymous mapping.
    pub(crate) path: &'a str,
}

// Without the sampler only our own `[vdso]` is looked up, by name.
#[cfg_attr(not(feature = "sampler"), allow(dead_code))]
impl MapsLine<'_> {
    /// Whether the mapping may be executed.
    pub(crate) fn executable(&self) -> bool {
        self.perms.contains('x')
    }
}

/// The text of `/proc/PID/maps` (`None`: this process's own), or `None` when it cannot be read
/// (the process is gone or not ours).
pub(crate) fn read(pid: Option<u32>) -> Option<String> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/maps"),
        None => "/proc/self/maps".to_string(),
    };
    std::fs::read_to_string(path).ok()
}

/// Every well-formed line of `text` (a `/proc/PID/maps`), in order.
pub(crate) fn lines(text: &str) -> impl Iterator<Item = MapsLine<'_>> {
    text.lines().filter_map(parse)
}

/// One line; `None` when it is not one (too few fields or a number that is not hexadecimal).
pub(crate) fn parse(line: &str) -> Option<MapsLine<'_>> {
    let mut fields = line.splitn(6, ' ');
    let (lo, hi) = fields.next()?.split_once('-')?;
    let perms = fields.next()?;
    let offset = fields.next()?;
    let _dev = fields.next()?;
    let _inode = fields.next()?;
    let start = u64::from_str_radix(lo, 16).ok()?;
    let end = u64::from_str_radix(hi, 16).ok()?;
    (start <= end).then_some(())?;
    Some(MapsLine {
        start,
        end,
        perms,
        offset: u64::from_str_radix(offset, 16).ok()?,
        path: fields.next().unwrap_or("").trim_start_matches(' '),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_keeps_its_spaces_and_its_deleted_mark() {
        let text = "\
7f1c2a428000-7f1c2a5bd000 r-xp 00028000 fe:01 1835128                    /usr/lib/libc.so.6
55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0                          [heap]
7f00000000-7f00001000 r-xp 00001000 fe:01 42                             /tmp/my dir/a b.so (deleted)
7ffd1000-7ffd3000 rw-p 00000000 00:00 0
not a line
zz-10 r-xp 0 0 0 /x
";
        let all: Vec<MapsLine> = lines(text).collect();
        assert_eq!(all.len(), 4, "{all:?}");
        assert_eq!(all[0].path, "/usr/lib/libc.so.6");
        assert_eq!(all[0].offset, 0x28000);
        assert!(all[0].executable() && !all[1].executable());
        assert_eq!(all[1].path, "[heap]");
        assert_eq!(all[2].path, "/tmp/my dir/a b.so (deleted)");
        assert_eq!((all[2].start, all[2].end), (0x7f00000000, 0x7f00001000));
        assert_eq!(all[3].path, "");
        assert_eq!((all[3].start, all[3].end), (0x7ffd1000, 0x7ffd3000));
    }

    #[test]
    fn our_own_maps_hold_our_code() {
        let here = our_own_maps_hold_our_code as *const () as usize as u64;
        let text = read(None).expect("/proc/self/maps");
        let line = lines(&text)
            .find(|l| l.start <= here && here < l.end)
            .expect("a mapping");
        assert!(line.executable(), "{line:?}");
    }
}
