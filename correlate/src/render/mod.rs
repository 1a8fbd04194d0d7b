//! Renderers: the ways `hpcview-rs` prints a [`ViewTree`](crate::ViewTree).
//!
//! - [`text`]: the indented tree for people (threshold folding, hot path, colour on a terminal);
//! - [`json`]: the documented JSON contract for scripts;
//! - [`folded`]: folded stacks for inferno-flamegraph and flamegraph.pl;
//! - [`source`]: source lines annotated with their costs.
//!
//! Every scope's name comes from the view ([`crate::label`]'s rules); renderers only lay it out.

pub mod folded;
pub mod json;
pub mod source;
pub mod text;
