//! Other tools' formats: speedscope and pprof files written from a database, and HPCToolkit's
//! own database, written and read.

pub(crate) mod export;
pub mod hpctoolkit;
