//! The kernel's `[vdso]` image, which every process maps but no file holds: a copy of our own
//! stands for the measured program's (the kernel maps the same one into every process; callers
//! check build-ids). Needed both to unwind through it and to name its code.

/// A copy of this process's own `[vdso]` image: the kernel maps the same one into every
/// process, so it stands for the measured program's.
pub fn own_vdso() -> Option<Vec<u8>> {
    let maps = crate::format::procmaps::read(None)?;
    let line = crate::format::procmaps::lines(&maps).find(|l| l.path == "[vdso]")?;
    let (lo, hi) = (line.start as usize, line.end as usize);
    // SAFETY: the vdso mapping is readable for the whole life of the process.
    let bytes = unsafe { std::slice::from_raw_parts(lo as *const u8, hi - lo) };
    Some(bytes.to_vec())
}
