//! # profiler: the measurement stage of hpctoolkit-rs (`hpcrun-rs`)
//!
//! (crate manual in progress)

pub mod addr;
pub mod db;
