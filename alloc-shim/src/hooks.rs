//! The interposed malloc family.
//!
//! Each exported function is a three-instruction naked stub that passes its caller's `sp` (at
//! entry it points at the return address) and `bp` as two extra arguments to the Rust entry
//! point and jumps there, so the entry point returns straight to the caller. The entry points
//! test the size first: a block under the minimum goes straight to glibc's `__libc_*`
//! function, as does every call before the shim's constructor has run.

use std::ffi::c_void;

use libc::{c_int, size_t};

use crate::format::{RecordHeader, OP_ALLOC, OP_FREE, OP_REALLOC};
use crate::{min_size, ring};
use hpcrun_alloc_format::monotonic_ns;

unsafe extern "C" {
    fn __libc_malloc(size: size_t) -> *mut c_void;
    fn __libc_calloc(n: size_t, size: size_t) -> *mut c_void;
    fn __libc_realloc(p: *mut c_void, size: size_t) -> *mut c_void;
    fn __libc_free(p: *mut c_void);
    fn __libc_memalign(align: size_t, size: size_t) -> *mut c_void;
    fn __libc_valloc(size: size_t) -> *mut c_void;
    fn __libc_pvalloc(size: size_t) -> *mut c_void;
}

/// Export `$name` with C signature `($args) -> $ret`, entering `$entry($args, sp, bp)`;
/// `$sp` and `$bp` are the argument registers after the function's own.
macro_rules! interpose {
    ($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty, $entry:ident, $sp:literal, $bp:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The C function's contract.
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            core::arch::naked_asm!(
                concat!("mov ", $sp, ", rsp"),
                concat!("mov ", $bp, ", rbp"),
                "jmp {entry}",
                entry = sym $entry,
            )
        }
    };
}

interpose!(
    /// `malloc`.
    malloc(size: size_t) -> *mut c_void, malloc_entry, "rsi", "rdx"
);
interpose!(
    /// `calloc`.
    calloc(n: size_t, size: size_t) -> *mut c_void, calloc_entry, "rdx", "rcx"
);
interpose!(
    /// `realloc`.
    realloc(p: *mut c_void, size: size_t) -> *mut c_void, realloc_entry, "rdx", "rcx"
);
interpose!(
    /// `reallocarray`.
    reallocarray(p: *mut c_void, n: size_t, size: size_t) -> *mut c_void, reallocarray_entry, "rcx", "r8"
);
interpose!(
    /// `free`.
    free(p: *mut c_void) -> (), free_entry, "rsi", "rdx"
);
interpose!(
    /// `posix_memalign`.
    posix_memalign(out: *mut *mut c_void, align: size_t, size: size_t) -> c_int, posix_memalign_entry, "rcx", "r8"
);
interpose!(
    /// `aligned_alloc` (glibc 2.36: the same as memalign).
    aligned_alloc(align: size_t, size: size_t) -> *mut c_void, memalign_entry, "rdx", "rcx"
);
interpose!(
    /// `memalign`.
    memalign(align: size_t, size: size_t) -> *mut c_void, memalign_entry, "rdx", "rcx"
);
interpose!(
    /// `valloc`.
    valloc(size: size_t) -> *mut c_void, valloc_entry, "rsi", "rdx"
);
interpose!(
    /// `pvalloc`.
    pvalloc(size: size_t) -> *mut c_void, pvalloc_entry, "rsi", "rdx"
);

/// One tracked call, before it is made.
struct Call {
    op: u32,
    size: usize,
    old: usize,
    sp: usize,
    bp: usize,
}

/// Make a tracked call: `f` returns the resulting block (0 if none); `ok` says from it whether
/// the call changed anything worth a record (a failed allocation does not).
#[inline(always)]
fn track(call: Call, f: impl FnOnce() -> usize, ok: impl FnOnce(usize) -> bool) -> usize {
    let saved = errno();
    let Some(writer) = ring::enter() else {
        set_errno(saved);
        return f();
    };
    set_errno(saved);
    let t_entry = monotonic_ns();
    writer.begin(t_entry);
    let result = f();
    let t_return = monotonic_ns();
    let after = errno();
    if ok(result) {
        let rec = RecordHeader {
            op: call.op,
            t_entry,
            t_return,
            ptr: if call.op == OP_FREE { call.old } else { result } as u64,
            size: call.size as u64,
            old_ptr: if call.op == OP_REALLOC {
                call.old as u64
            } else {
                0
            },
            // SAFETY: at entry `sp` points at the return address pushed by the call.
            ip: unsafe { *(call.sp as *const u64) },
            sp: call.sp as u64,
            bp: call.bp as u64,
            ..RecordHeader::default()
        };
        writer.write(rec, call.op != OP_FREE);
    }
    writer.end();
    ring::leave();
    set_errno(after);
    result
}

/// Whether a block of `size` bytes is recorded.
#[inline(always)]
fn tracked(size: usize) -> bool {
    size as u64 >= min_size()
}

/// Whether freeing (or reallocating) live block `p` is recorded: it is at least the minimum.
#[inline(always)]
fn tracked_block(p: *mut c_void) -> bool {
    let min = min_size();
    // SAFETY: `p` is a live block of this allocator, passed by the program to free/realloc.
    !p.is_null() && min != u64::MAX && (min == 0 || unsafe { usable_bytes(p) } >= min)
}

/// `malloc_usable_size(p)` for a live block, without glibc's in-use test (which reads the
/// next chunk's header: a cache miss on every free). The chunk's size word lies just below the
/// block (low bits: flags); an mmapped chunk (flag 2) has two words of overhead, others one.
///
/// # Safety
/// `p` must be a live block of glibc's malloc.
#[inline(always)]
unsafe fn usable_bytes(p: *mut c_void) -> u64 {
    // SAFETY: every glibc block is preceded by its chunk's size word.
    let word = unsafe { p.cast::<u64>().sub(1).read() };
    let overhead = if word & 2 != 0 { 16 } else { 8 };
    (word & !7) - overhead
}

/// An allocation call that returns `f()`. The untracked path stays a tail jump to glibc: the
/// tracked one is out of line.
#[inline(always)]
fn alloc(size: usize, sp: usize, bp: usize, f: impl FnOnce() -> *mut c_void) -> *mut c_void {
    if !tracked(size) {
        return f();
    }
    alloc_tracked(size, sp, bp, f)
}

#[cold]
#[inline(never)]
fn alloc_tracked(
    size: usize,
    sp: usize,
    bp: usize,
    f: impl FnOnce() -> *mut c_void,
) -> *mut c_void {
    let call = Call {
        op: OP_ALLOC,
        size,
        old: 0,
        sp,
        bp,
    };
    track(call, || f() as usize, |p| p != 0) as *mut c_void
}

extern "C" fn malloc_entry(size: size_t, sp: usize, bp: usize) -> *mut c_void {
    // SAFETY: glibc's malloc.
    alloc(size, sp, bp, || unsafe { __libc_malloc(size) })
}

extern "C" fn calloc_entry(n: size_t, size: size_t, sp: usize, bp: usize) -> *mut c_void {
    // SAFETY: glibc's calloc (it checks the product for overflow).
    alloc(n.saturating_mul(size), sp, bp, || unsafe {
        __libc_calloc(n, size)
    })
}

extern "C" fn memalign_entry(align: size_t, size: size_t, sp: usize, bp: usize) -> *mut c_void {
    // SAFETY: glibc's memalign.
    alloc(size, sp, bp, || unsafe { __libc_memalign(align, size) })
}

extern "C" fn valloc_entry(size: size_t, sp: usize, bp: usize) -> *mut c_void {
    // SAFETY: glibc's valloc.
    alloc(size, sp, bp, || unsafe { __libc_valloc(size) })
}

extern "C" fn pvalloc_entry(size: size_t, sp: usize, bp: usize) -> *mut c_void {
    // SAFETY: glibc's pvalloc.
    alloc(size, sp, bp, || unsafe { __libc_pvalloc(size) })
}

extern "C" fn posix_memalign_entry(
    out: *mut *mut c_void,
    align: size_t,
    size: size_t,
    sp: usize,
    bp: usize,
) -> c_int {
    let word = size_of::<usize>();
    if !align.is_multiple_of(word) || !(align / word).is_power_of_two() {
        return libc::EINVAL;
    }
    let saved = errno();
    // SAFETY: glibc's memalign with a valid alignment.
    let p = alloc(size, sp, bp, || unsafe { __libc_memalign(align, size) });
    set_errno(saved);
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller passes a writable pointer slot.
    unsafe { out.write(p) };
    0
}

extern "C" fn realloc_entry(p: *mut c_void, size: size_t, sp: usize, bp: usize) -> *mut c_void {
    if !tracked(size) && !tracked_block(p) {
        // SAFETY: glibc's realloc.
        return unsafe { __libc_realloc(p, size) };
    }
    realloc_tracked(p, size, sp, bp)
}

#[cold]
#[inline(never)]
fn realloc_tracked(p: *mut c_void, size: size_t, sp: usize, bp: usize) -> *mut c_void {
    let call = Call {
        op: OP_REALLOC,
        size,
        old: p as usize,
        sp,
        bp,
    };
    // SAFETY: glibc's realloc. realloc(p, 0) frees p and returns NULL: a record; any other
    // NULL is a failure that left p as it was: none.
    track(
        call,
        || unsafe { __libc_realloc(p, size) } as usize,
        |r| r != 0 || size == 0,
    ) as *mut c_void
}

extern "C" fn reallocarray_entry(
    p: *mut c_void,
    n: size_t,
    size: size_t,
    sp: usize,
    bp: usize,
) -> *mut c_void {
    match n.checked_mul(size) {
        Some(total) => realloc_entry(p, total, sp, bp),
        None => {
            set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    }
}

extern "C" fn free_entry(p: *mut c_void, sp: usize, bp: usize) {
    if !tracked_block(p) {
        // SAFETY: glibc's free.
        return unsafe { __libc_free(p) };
    }
    free_tracked(p, sp, bp);
}

#[cold]
#[inline(never)]
fn free_tracked(p: *mut c_void, sp: usize, bp: usize) {
    let call = Call {
        op: OP_FREE,
        size: 0,
        old: p as usize,
        sp,
        bp,
    };
    track(
        call,
        || {
            // SAFETY: glibc's free.
            unsafe { __libc_free(p) };
            0
        },
        |_| true,
    );
}

fn errno() -> c_int {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() }
}

fn set_errno(value: c_int) {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() = value };
}
