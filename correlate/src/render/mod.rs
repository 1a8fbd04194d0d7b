//! Renderers: the ways `hpcview-rs` prints a [`ViewTree`](crate::viewtree::ViewTree).
//!
//! - [`text`]: the indented tree for people (threshold folding, hot path, colour on a terminal);
//! - [`json`]: the documented JSON contract for scripts;
//! - [`folded`]: folded stacks for inferno-flamegraph and flamegraph.pl;
//! - [`source`]: source lines annotated with their costs.
//!
//! [`labels`] and [`names`] hold the naming rules the renderers share.

pub mod folded;
pub mod json;
pub mod labels;
pub mod names;
pub mod source;
pub mod text;
