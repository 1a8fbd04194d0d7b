//! Reading another process's memory (`process_vm_readv`), as root or as its owner.

/// Fill `buf` from process `pid`'s memory at `at`; whether all of it could be read.
pub(crate) fn read_process(pid: u32, at: u64, buf: &mut [u8]) -> bool {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: at as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: reads `buf.len()` bytes of another process into `buf`, which outlives the call.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    n == buf.len() as isize
}

/// The 8-byte little-endian word of process `pid` at `at`.
pub(crate) fn read_u64(pid: u32, at: u64) -> Option<u64> {
    let mut word = [0u8; 8];
    read_process(pid, at, &mut word).then(|| u64::from_le_bytes(word))
}
