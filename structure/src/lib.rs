//! placeholder
pub mod cfg;
