//! The `profile.db` format and what it is made of: always built, and all that readers of a
//! profile (`structure`, `correlate`, tests) compile when they take this crate without its
//! sampler.

pub mod addr;
pub(crate) mod arena;
pub mod builder;
pub mod bundle;
pub(crate) mod calltree;
pub mod dataref;
pub mod db;
pub mod debugfiles;
pub mod envelope;
pub mod jitdump;
pub mod job;
pub mod openmp;
pub(crate) mod procmaps;
pub mod sections;
pub mod trace;
pub mod vdso;
pub mod watchdb;
pub(crate) mod write_behind;
