//! placeholder

pub mod render;
pub mod viewtree;
