//! Correlation, what `hpcprof-rs` and `hpcprof-rs-mpi` do: recognise the inputs, find or make
//! each module's structure (file, cache, analysis), stream the profiles, expand every address
//! into its static context, and write one database.

pub(crate) mod cache;
pub(crate) mod correlation;
pub(crate) mod data;
pub(crate) mod enrich;
pub(crate) mod error;
pub(crate) mod inputs;
pub(crate) mod jitdump;
pub(crate) mod jitmap;
pub(crate) mod jitname;
pub(crate) mod openmp;
pub(crate) mod profiles;
pub(crate) mod shares;
pub(crate) mod structures;
pub(crate) mod traces;
pub(crate) mod wall;
