//! Views: models computed from a database (the top-down, callers and flat trees, their shaping,
//! statistics across ranks, two databases compared, data objects, time). They compute and name;
//! the outputs only present them.

pub(crate) mod asm;
pub(crate) mod data;
pub(crate) mod diff;
pub(crate) mod formula;
pub(crate) mod projection;
pub(crate) mod shape;
pub(crate) mod stats;
pub(crate) mod time;
pub(crate) mod tree;
