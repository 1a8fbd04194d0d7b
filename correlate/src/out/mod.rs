//! Outputs: a view as text, JSON, CSV, folded stacks, SVG and PNG pictures, or one HTML report;
//! and the producer/consumer bindings of watchpoint runs.

pub mod bindings;
pub mod render;
pub(crate) mod report;
