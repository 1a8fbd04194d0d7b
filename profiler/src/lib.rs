//! # profiler: the measurement stage of hpctoolkit-rs (`hpcrun-rs`)
//!
//! This crate samples a running program's calling contexts with the kernel's `perf_event_open`
//! interface and keeps them as one calling-context tree (CCT) per thread, written to a
//! `profile.db` file that `hpcprof-rs` (crate `correlate`) reads back with [`db::Profile::read`].
//!
//! ## What happens in a run ([`session::run`])
//!
//! 1. The command is forked and held before `exec` ([`launch`]); one sampling event per CPU is
//!    opened on it with `inherit` and `enable_on_exec` ([`perf`]), so every thread and child
//!    process it creates is followed, and counting starts exactly at `exec`. Several `-e` events
//!    share one ring buffer per CPU (`ring`). `-p PID` opens per-thread events instead.
//! 2. Each sample carries the interrupted user registers and a copy of the top of the user
//!    stack. The `recorder` unwinds it at once with framehop (`unwind`), using the
//!    `.eh_frame` of every module the process mapped (`loadmap`, `image`), and inserts the path
//!    into the thread's tree (`cct`); memory grows with distinct paths, not samples.
//! 3. A path whose stack outgrew the copy is completed from the thread's previous complete path
//!    when the frame at the edge of the copy is the same frame instance (same stack address and
//!    return address), csprof's observation that old frames do not change between samples.
//!    Otherwise it is filed, as far as it goes, under `<partial call paths>` and counted.
//! 4. Addresses are stored as link-time addresses of their module ([`addr::Svma`]), converted
//!    from runtime addresses in exactly one place (`loadmap::AddressSpace::resolve`).
//! 5. With `--data`, each sample's data address (a page fault's, the PMU's for the precise
//!    memory events of [`pmu`], or the operand of the interrupted instruction) is classified at
//!    once as a heap block, static, stack frame or mapping ([`dataref`]), against the heap
//!    blocks live at that moment (the allocation shim's records, or uprobes on the allocator);
//!    a precise memory sample also keeps where the access was served from and its latency
//!    ([`sample`]).
//!
//! ## What the caller provides and gets
//!
//! ```no_run
//! use profiler::events::EventSpec;
//! use profiler::session::{self, Options, Target};
//!
//! let opts = Options {
//!     events: vec![EventSpec::parse("cpu-clock@f1000").unwrap()],
//!     stack_size: profiler::perf::DEFAULT_STACK_SIZE,
//!     ring_pages: None,
//!     target: Target::Launch(vec!["./app".into()]),
//!     data: false,
//!     alloc_min: 4096,
//!     trace: None,
//!     notify: |notice| eprintln!("{notice}"),
//!     watch: None,
//!     backpressure: Default::default(),
//!     python: true,
//!     java: true,
//! };
//! let measurement = session::run(&opts).expect("measured");
//! let profile = session::into_profile(measurement);
//! profile.write(std::path::Path::new("profile.db")).expect("written");
//! ```
//!
//! ## What it is not
//!
//! It does not symbolize: names, inlined frames, loops and lines are the correlator's job
//! (`hpcprof-rs`), from the module paths and build-ids stored here.

#![deny(missing_docs)]

// The profile.db format (always built): what readers of a profile compile.
mod format;
pub use format::{
    addr, builder, bundle, dataref, db, debugfiles, envelope, jitdump, job, openmp, sections,
    trace, vdso, watchdb,
};

// The sampler (feature `sampler`, on by default): perf_event_open, unwinding, hpcrun-rs.
#[cfg(feature = "sampler")]
mod sampler;
#[cfg(feature = "sampler")]
pub use sampler::{
    capture::{events, groups, hold, java, launch, perf, pmu, python},
    data::{alloc, sample},
    results::{bundling, measurements, output, report, report_data},
    session, watch,
};
