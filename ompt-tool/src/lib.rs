//! `libhpcrun_ompt.so`: the OpenMP tool (OMPT, OpenMP 5.0 §4) that `hpcrun-rs` names in
//! `OMP_TOOL_LIBRARIES`. LLVM's and Intel's runtimes load it and call [`ompt_start_tool`]; GCC's
//! `libgomp` has no tools interface and never does. The tool records, per thread, when each
//! parallel region begins and ends on the thread that encounters it (with the enclosing
//! region's id, for nested regions) and when each thread begins and ends its implicit task of
//! a region, and appends them to the file `hpcrun-rs` passes by number in
//! [`ENV_FD`] (format: [`hpcrun_alloc_format::ompt`]).
//! Without that variable, or where the runtime offers no `ompt_set_callback`, the tool declines
//! and the program runs as without it.
//!
//! Costs per event (four per region of two threads): a clock read (no system call) and an uncontended lock of the thread's own
//! buffer; one `write` per 2048 records. A forked child must not write its parent's records: a
//! handler run in the child at `fork` counts forks, and a buffer filled before the last one is
//! emptied (no `getpid` per event: each system call in a region's path is a chance for the
//! scheduler to switch the thread out while its team waits).

use hpcrun_alloc_format::monotonic_ns;
use hpcrun_alloc_format::ompt::{
    ChunkHeader, Record, CHUNK_HEADER_BYTES, CHUNK_MAGIC, ENV_FD, PARALLEL_BEGIN, PARALLEL_END,
    RECORD_BYTES, TASK_BEGIN, TASK_END,
};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// OMPT's `ompt_data_t`: a word the runtime keeps for the tool per region and per task.
#[repr(C)]
pub union OmptData {
    value: u64,
    ptr: *mut c_void,
}

/// OMPT's `ompt_start_tool_result_t`.
#[repr(C)]
pub struct StartToolResult {
    initialize: extern "C" fn(Lookup, c_int, *mut OmptData) -> c_int,
    finalize: extern "C" fn(*mut OmptData),
    tool_data: OmptData,
}

/// OMPT's `ompt_function_lookup_t`.
type Lookup = unsafe extern "C" fn(*const c_char) -> *const c_void;
/// OMPT's `ompt_set_callback_t`.
type SetCallback = unsafe extern "C" fn(c_int, *const c_void) -> c_int;

/// `ompt_callbacks_t` values (OpenMP 5.0, table 4.2).
const CALLBACK_THREAD_END: c_int = 2;
const CALLBACK_PARALLEL_BEGIN: c_int = 3;
const CALLBACK_PARALLEL_END: c_int = 4;
const CALLBACK_IMPLICIT_TASK: c_int = 7;
/// `ompt_scope_begin` of `ompt_scope_endpoint_t`.
const SCOPE_BEGIN: c_int = 1;
/// `ompt_task_initial` of `ompt_task_flag_t`: a thread's initial task, not a region's.
const TASK_INITIAL: c_int = 1;

/// Records a thread keeps before it writes them.
const CHUNK_RECORDS: usize = 2048;

/// The file the records go to (`-1`: none, the tool declined).
static FD: AtomicI32 = AtomicI32::new(-1);
/// The next parallel region's id (never 0: 0 means "no region").
static NEXT_REGION: AtomicU64 = AtomicU64::new(1);
/// Forks this process is the child of, counted by [`after_fork`].
static FORKS: AtomicU64 = AtomicU64::new(0);
/// Every thread's buffer, for the runtime's shutdown to write out.
static BUFFERS: Mutex<Vec<Arc<Mutex<Buffer>>>> = Mutex::new(Vec::new());

/// One thread's records not yet written.
struct Buffer {
    /// [`FORKS`] when the buffer was filled for this process.
    forks: u64,
    pid: u32,
    tid: u32,
    records: Vec<Record>,
    lost: u32,
}

thread_local! {
    static MINE: Arc<Mutex<Buffer>> = register();
}

/// A new buffer for the calling thread, listed in [`BUFFERS`].
fn register() -> Arc<Mutex<Buffer>> {
    let buffer = Arc::new(Mutex::new(Buffer {
        forks: FORKS.load(Ordering::Relaxed),
        pid: std::process::id(),
        tid: gettid(),
        records: Vec::with_capacity(CHUNK_RECORDS),
        lost: 0,
    }));
    lock(&BUFFERS).push(buffer.clone());
    buffer
}

/// A lock that a panic elsewhere does not poison for us (the tool must never panic).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// Keep a record of the calling thread, writing the buffer out when it is full.
fn push(kind: u32, index: u32, region: u64, other: u64, codeptr: u64) {
    let time = monotonic_ns();
    let _ = MINE.try_with(|mine| {
        let mut b = lock(mine);
        let forks = FORKS.load(Ordering::Relaxed);
        if b.forks != forks {
            // A forked child: what the buffer holds is its parent's.
            b.records.clear();
            (b.forks, b.pid, b.tid, b.lost) = (forks, std::process::id(), gettid(), 0);
        }
        b.records.push(Record {
            kind,
            index,
            time,
            region,
            other,
            codeptr,
        });
        if b.records.len() >= CHUNK_RECORDS {
            flush(&mut b);
        }
    });
}

/// Append the buffer's records to the file as one chunk (one `write`, so that chunks never
/// interleave), or count them lost.
fn flush(b: &mut Buffer) {
    if b.records.is_empty() || b.forks != FORKS.load(Ordering::Relaxed) {
        b.records.clear();
        return;
    }
    let header = ChunkHeader {
        magic: CHUNK_MAGIC,
        pid: b.pid,
        tid: b.tid,
        count: b.records.len() as u32,
        lost: b.lost,
    };
    let mut bytes = Vec::with_capacity(CHUNK_HEADER_BYTES + RECORD_BYTES * b.records.len());
    bytes.extend_from_slice(&header.to_bytes());
    for r in &b.records {
        bytes.extend_from_slice(&r.to_bytes());
    }
    if !write_all(FD.load(Ordering::Relaxed), &bytes) {
        b.lost = b.lost.saturating_add(b.records.len() as u32);
    }
    b.records.clear();
}

/// Write all of `bytes` to `fd` in one call where the kernel allows; false on failure.
fn write_all(fd: c_int, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is valid for reading its length.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return false;
        }
        bytes = &bytes[n as usize..];
    }
    true
}

/// Called by an OpenMP runtime at start-up: the tool's entry points, or null (the tool
/// declines) where `hpcrun-rs` gave no file to write to.
///
/// # Safety
///
/// Called by the runtime as OMPT prescribes; `runtime_version` is not read.
#[no_mangle]
pub unsafe extern "C" fn ompt_start_tool(
    _omp_version: c_uint,
    _runtime_version: *const c_char,
) -> *mut StartToolResult {
    let fd = std::env::var(ENV_FD)
        .ok()
        .and_then(|v| v.parse::<c_int>().ok());
    // SAFETY: F_GETFD only asks whether the descriptor is open.
    let Some(fd) = fd.filter(|&fd| fd >= 0 && unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0)
    else {
        return std::ptr::null_mut();
    };
    FD.store(fd, Ordering::Relaxed);
    // SAFETY: the handler only increments an atomic, which is safe in a forked child.
    unsafe { libc::pthread_atfork(None, None, Some(after_fork)) };
    Box::into_raw(Box::new(StartToolResult {
        initialize,
        finalize,
        tool_data: OmptData { value: 0 },
    }))
}

/// Run in the child of a `fork`: the buffers now hold the parent's records.
extern "C" fn after_fork() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// Register the callbacks; 0 (the tool declines) where the runtime has no `ompt_set_callback`.
extern "C" fn initialize(lookup: Lookup, _device: c_int, _data: *mut OmptData) -> c_int {
    // SAFETY: the runtime's lookup takes a NUL-terminated name.
    let set = unsafe { lookup(c"ompt_set_callback".as_ptr()) };
    if set.is_null() {
        return 0;
    }
    // SAFETY: the runtime's `ompt_set_callback` has this signature (OpenMP 5.0 §4.6.1.3).
    let set: SetCallback = unsafe { std::mem::transmute::<*const c_void, SetCallback>(set) };
    let callbacks: [(c_int, *const c_void); 4] = [
        (CALLBACK_PARALLEL_BEGIN, parallel_begin as *const c_void),
        (CALLBACK_PARALLEL_END, parallel_end as *const c_void),
        (CALLBACK_IMPLICIT_TASK, implicit_task as *const c_void),
        (CALLBACK_THREAD_END, thread_end as *const c_void),
    ];
    for (event, callback) in callbacks {
        // SAFETY: each callback has the signature OMPT prescribes for its event.
        unsafe { set(event, callback) };
    }
    1
}

/// The runtime shuts down: every thread's records are written.
extern "C" fn finalize(_data: *mut OmptData) {
    for buffer in lock(&BUFFERS).iter() {
        flush(&mut lock(buffer));
    }
}

/// `ompt_callback_parallel_begin`: a new region gets its id.
extern "C" fn parallel_begin(
    encountering_task: *mut OmptData,
    _frame: *const c_void,
    parallel: *mut OmptData,
    _requested: c_uint,
    _flags: c_int,
    codeptr: *const c_void,
) {
    if parallel.is_null() {
        return;
    }
    let region = NEXT_REGION.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the runtime hands valid data words (or null) for the region and the task.
    let enclosing = unsafe {
        (*parallel).value = region;
        encountering_task
            .as_ref()
            .map_or(0, |t| t.value & !ENCOUNTERING)
    };
    push(PARALLEL_BEGIN, 0, region, enclosing, codeptr as u64);
}

/// `ompt_callback_parallel_end`.
extern "C" fn parallel_end(
    parallel: *mut OmptData,
    _encountering_task: *mut OmptData,
    _flags: c_int,
    _codeptr: *const c_void,
) {
    // SAFETY: the runtime hands the region's data word (or null).
    if let Some(region) = unsafe { parallel.as_ref() }.map(|p| unsafe { p.value }) {
        push(PARALLEL_END, 0, region, 0, 0);
    }
}

/// `ompt_callback_implicit_task`: a thread begins or ends its share of a region. The task's
/// data word keeps the region's id, for the end (where the region's may be null) and for
/// regions nested inside it. The encountering thread's own task (number 0) begins and ends with
/// the region, whose records say when: it is not recorded again (a third fewer records on the
/// region's path), its data word marked so that its end is known as such.
extern "C" fn implicit_task(
    endpoint: c_int,
    parallel: *mut OmptData,
    task: *mut OmptData,
    _actual_parallelism: c_uint,
    index: c_uint,
    flags: c_int,
) {
    if flags & TASK_INITIAL != 0 || task.is_null() {
        return;
    }
    // SAFETY: the runtime hands valid data words (or null) for the region and the task.
    unsafe {
        if endpoint == SCOPE_BEGIN {
            let Some(region) = parallel.as_ref().map(|p| p.value) else {
                return;
            };
            if index == 0 {
                (*task).value = region | ENCOUNTERING;
            } else {
                (*task).value = region;
                push(TASK_BEGIN, index, region, 0, 0);
            }
        } else if (*task).value & ENCOUNTERING == 0 {
            push(TASK_END, index, (*task).value, 0, 0);
        }
    }
}

/// Marks the data word of an encountering thread's own implicit task (region ids stay below).
const ENCOUNTERING: u64 = 1 << 63;

/// `ompt_callback_thread_end`: the thread's records are written before it goes.
extern "C" fn thread_end(_thread: *mut OmptData) {
    let _ = MINE.try_with(|mine| flush(&mut lock(mine)));
}
