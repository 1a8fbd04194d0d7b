//! The database (`*.hpcdb`): the enriched calling-context tree with its costs, the data and
//! trace sections, and how each scope is named. Everything else in the crate reads it; it reads
//! nothing of theirs.

pub(crate) mod data;
pub(crate) mod database;
pub(crate) mod heap_name;
pub(crate) mod ids;
pub(crate) mod instructions;
pub(crate) mod label;
pub(crate) mod node;
pub(crate) mod node_costs;
pub(crate) mod reshape;
