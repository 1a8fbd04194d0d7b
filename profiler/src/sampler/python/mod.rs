//! Python's own frames at each sample: which Python function, file and line each activation of
//! CPython's evaluator was running, read in the kernel while the sampled thread is stopped
//! (an eBPF program on the sampling events, [`bpf`]), from where each interpreter version keeps
//! them ([`layout`]); the code objects read back from the process for their names and line
//! tables ([`code`]) while it runs ([`collector`], [`early`]); and the frames spliced into the native path, each activation's Python
//! frames below its `_PyEval_EvalFrameDefault` frame, where the two agree ([`splice`]).
//!
//! CPython 3.11 to 3.13 on x86-64, as root (loading an eBPF program needs `CAP_BPF` and
//! `CAP_PERFMON`); otherwise hpcrun-rs falls back to CPython's perf trampolines (3.12 and
//! later, functions without lines; see [`crate::sampler::capture::python`]).

pub(crate) mod bpf;
pub(crate) mod code;
pub(crate) mod collector;
pub(crate) mod early;
pub(crate) mod layout;
pub(crate) mod splice;
