//! # hpcrun-alloc: the allocation-tracking shim of `hpcrun-rs --data`
//!
//! `libhpcrun_alloc.so` is preloaded (`LD_PRELOAD`) into the measured program by `hpcrun-rs`. It
//! interposes the malloc family (`hooks`) and, for blocks of at least a minimum size, writes a
//! record (op, thread, entry and return times on CLOCK_MONOTONIC, the block, the return
//! address, `sp` and `bp` at entry, and a copy of the caller's stack) into a per-thread ring in
//! shared memory (`ring`) that `hpcrun-rs` maps and reads (the layout is in
//! [`hpcrun_alloc_format`]). Unwinding happens in `hpcrun-rs`, with the same code as its samples.
//!
//! Rules the shim keeps, since it runs inside every allocation of the program:
//! - it never allocates on its own path (no Rust heap use; thread state is `const`-initialised
//!   thread-locals of plain types) and calls glibc's `__libc_*` entry points directly;
//! - calls made before its constructor runs (ld.so's, other constructors') and calls made while
//!   the thread is already inside the shim pass straight through;
//! - a block under the minimum costs one comparison (one `malloc_usable_size` for a free);
//! - after `fork` the child makes its own rings; `exec` keeps the socket (not close-on-exec) and
//!   `LD_PRELOAD`; a thread's exit closes its ring.
//!
//! Without `format::ENV_FD` in the environment the shim records nothing.

#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use hpcrun_alloc_format as format;
mod hooks;
mod ring;

use std::ffi::CStr;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

use format::{ENV_FD, ENV_MIN, ENV_RING, ENV_STACK, MAX_STACK_BYTES};

/// Smallest block recorded; `u64::MAX` (nothing recorded) until the constructor has run.
static MIN: AtomicU64 = AtomicU64::new(u64::MAX);
/// Stack bytes copied per allocation.
static STACK_BYTES: AtomicU32 = AtomicU32::new(0);
/// Data bytes of each ring (a power of two).
static RING_BYTES: AtomicU64 = AtomicU64::new(0);
/// The socket to `hpcrun-rs`, or -1.
static SOCK: AtomicI32 = AtomicI32::new(-1);

const DEFAULT_MIN: u64 = 4096;
const DEFAULT_STACK_BYTES: u64 = 8192;
const DEFAULT_RING_BYTES: u64 = 8 << 20;
const MIN_RING_BYTES: u64 = 64 << 10;

/// The smallest block size recorded (`u64::MAX` while the shim is off).
#[inline(always)]
fn min_size() -> u64 {
    MIN.load(Ordering::Relaxed)
}

/// Runs when the library is loaded, after libc's constructors: read the configuration, then
/// switch recording on.
extern "C" fn init() {
    let Some(fd) = env_u64(ENV_FD).and_then(|v| i32::try_from(v).ok()) else {
        return;
    };
    if !is_socket(fd) {
        return;
    }
    let ring = env_u64(ENV_RING)
        .unwrap_or(DEFAULT_RING_BYTES)
        .clamp(MIN_RING_BYTES, 1 << 40)
        .next_power_of_two();
    let stack = env_u64(ENV_STACK)
        .unwrap_or(DEFAULT_STACK_BYTES)
        .min(u64::from(MAX_STACK_BYTES));
    if !ring::install() {
        return;
    }
    SOCK.store(fd, Ordering::Relaxed);
    RING_BYTES.store(ring, Ordering::Relaxed);
    STACK_BYTES.store(stack as u32, Ordering::Relaxed);
    MIN.store(env_u64(ENV_MIN).unwrap_or(DEFAULT_MIN), Ordering::Release);
}

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = init;

/// An environment variable as a decimal number, read without allocating.
fn env_u64(name: &str) -> Option<u64> {
    let mut key = [0u8; 32];
    key.get_mut(..name.len())?.copy_from_slice(name.as_bytes());
    // SAFETY: `key` is NUL-terminated (names are shorter than the buffer); getenv returns NULL
    // or a pointer into the environment, valid while nobody calls setenv, as at our init.
    let value = unsafe { libc::getenv(key.as_ptr().cast()) };
    if value.is_null() {
        return None;
    }
    // SAFETY: getenv's result is a NUL-terminated string.
    let text = unsafe { CStr::from_ptr(value) };
    text.to_str().ok()?.parse().ok()
}

/// Whether descriptor `fd` is open and a socket (the program may have reused the number).
fn is_socket(fd: i32) -> bool {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a `stat` into the buffer when it returns 0.
    unsafe {
        libc::fstat(fd, st.as_mut_ptr()) == 0
            && st.assume_init().st_mode & libc::S_IFMT == libc::S_IFSOCK
    }
}
