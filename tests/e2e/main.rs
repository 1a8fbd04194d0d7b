//! End-to-end tests of the hpctoolkit-rs tools: fixture programs compiled at test time
//! (`tests/fixtures/`), measured with hpcrun-rs, analysed with hpcstruct-rs, correlated with
//! hpcprof-rs and viewed with hpcview-rs, each result checked against an independent oracle
//! (addr2line, gdb, perf, the ELF symbol table, counts built into the fixtures). One test
//! binary, one module per area; `support` holds what they share.

mod browser;
mod correlate_prof_common;
mod correlate_view_support;
mod debuginfod;
mod export_support;
mod firefox;
mod structure_support;
mod support;
mod synthetic_db;

mod alloc_shim;
mod asm;
mod bundle;
mod correlate_data;
mod correlate_data_alloc;
mod correlate_prof_callers;
mod correlate_prof_inputs;
mod correlate_prof_integrity;
mod correlate_prof_perf;
mod correlate_prof_stlmap;
mod correlate_prof_vdso;
mod correlate_view_cli;
mod correlate_view_deep;
mod correlate_view_html;
mod correlate_view_html_panes;
mod correlate_view_html_synthetic;
mod correlate_view_inputs;
mod correlate_view_pipeline;
mod correlate_view_shape;
mod derived_metrics;
mod export_diff;
mod export_formats;
mod fuzz_regressions;
mod hpcrun;
mod hpcrun_data;
mod hpcrun_layouts;
mod hpcrun_output;
mod hpcrun_threads;
mod hpctoolkit_db;
mod jit;
mod memory_footprint;
mod memory_map;
mod minidebuginfo;
mod offcpu;
mod one_truth;
mod openmp;
mod parallel_jobs;
mod parallel_jobs_mpi;
mod python;
mod reproducible;
mod structure_aliens;
mod structure_cli;
mod structure_fixtures;
mod structure_focus;
mod structure_inline_names;
mod structure_languages;
mod structure_loops;
mod structure_output;
mod structure_robustness;
mod structure_variables;
mod structure_xml;
mod trace_timeline;
mod watch_bindings;
