//! placeholder
pub mod cfg;
pub mod loops;
