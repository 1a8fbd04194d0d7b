//! What the OpenMP runtimes call things: the entry points that wait, and the system libraries
//! a worker thread starts in.

/// Entry points through which the program waits for other threads: barriers, the ends of
/// work-sharing constructs and regions, critical sections, ordered blocks, task waits and
/// locks, in GCC's `libgomp` and LLVM's `libomp`. Time under one of them is idle time.
const WAITS: &[&str] = &[
    "GOMP_barrier",
    "GOMP_barrier_cancel",
    "GOMP_loop_end",
    "GOMP_loop_end_cancel",
    "GOMP_sections_end",
    "GOMP_sections_end_cancel",
    "GOMP_single_copy_start",
    "GOMP_critical_start",
    "GOMP_critical_name_start",
    "GOMP_atomic_start",
    "GOMP_ordered_start",
    "GOMP_doacross_wait",
    "GOMP_doacross_ull_wait",
    "GOMP_taskwait",
    "GOMP_taskwait_depend",
    "GOMP_taskgroup_end",
    "GOMP_parallel_end",
    "__kmpc_barrier",
    "__kmpc_critical",
    "__kmpc_critical_with_hint",
    "__kmpc_end_reduce",
    "__kmpc_ordered",
    "__kmpc_omp_taskwait",
    "__kmpc_end_taskgroup",
    "__kmpc_doacross_wait",
    "__kmpc_set_lock",
    "__kmpc_set_nest_lock",
    "omp_set_lock",
    "omp_set_nest_lock",
];

/// Whether the runtime entry point `name` waits for other threads ([`WAITS`]).
pub(crate) fn is_wait(name: &str) -> bool {
    WAITS.contains(&name)
}

/// Entry points that create explicit tasks, in GCC's `libgomp` and LLVM's `libomp`: the thread
/// that creates a task may run it at once, inside the call.
const TASK_CREATION: &[&str] = &[
    "GOMP_task",
    "GOMP_taskloop",
    "GOMP_taskloop_ull",
    "__kmpc_omp_task",
    "__kmpc_omp_task_with_deps",
    "__kmpc_omp_task_begin_if0",
    "__kmpc_taskloop",
    "__kmpc_taskloop_5",
];

/// Whether the runtime entry point `name` creates explicit tasks ([`TASK_CREATION`]).
pub(crate) fn creates_tasks(name: &str) -> bool {
    TASK_CREATION.contains(&name)
}

/// Whether the runtime entry point `name` creates tasks or waits: a program's code run inside
/// it is a task, run there by the thread that made it or waits, not a parallel region's body.
pub(crate) fn runs_tasks(name: &str) -> bool {
    creates_tasks(name) || is_wait(name)
}

/// Whether the module at `path` is a system library a thread starts in (the C library and
/// the dynamic loader): frames of these above a runtime frame mean a worker thread's start.
/// Below a runtime frame, they are the runtime's work, never a body: so are GCC's support
/// library (its initialisers run when the runtime loads a library), the kernel's vDSO (the
/// runtime reads the clock) and hpcrun-rs's own OpenMP tool (its callbacks run inside the
/// runtime).
pub(crate) fn is_system(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    [
        "libc.so",
        "libc-",
        "libpthread",
        "ld-linux",
        "ld.so",
        "ld64.so",
        "libgcc_s.so",
        "libhpcrun_ompt.so",
        "[vdso]",
        "linux-vdso.so",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_and_system_libraries() {
        assert!(is_wait("GOMP_barrier"));
        assert!(is_wait("__kmpc_barrier"));
        assert!(!is_wait("GOMP_parallel"));
        assert!(!is_wait("GOMP_loop_nonmonotonic_dynamic_next"));
        assert!(runs_tasks("GOMP_task") && runs_tasks("__kmpc_omp_task"));
        assert!(runs_tasks("GOMP_barrier") && !runs_tasks("GOMP_parallel"));
        assert!(is_system("/usr/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(is_system("/lib64/ld-linux-x86-64.so.2"));
        assert!(!is_system("/usr/lib/x86_64-linux-gnu/libgomp.so.1"));
        assert!(!is_system("/home/u/ldpc-solver"));
        assert!(is_system("/usr/lib/x86_64-linux-gnu/libgcc_s.so.1"));
        assert!(is_system("/opt/hpctoolkit-rs/libhpcrun_ompt.so"));
        assert!(is_system("[vdso]"));
    }
}
