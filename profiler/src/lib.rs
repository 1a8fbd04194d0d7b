//! # profiler: the measurement stage of hpctoolkit-rs (`hpcrun-rs`)
//!
//! (crate manual in progress)

pub mod addr;
pub mod cct;
pub mod db;
pub mod events;
pub mod image;
pub mod launch;
pub mod loadmap;
pub mod perf;
pub mod recorder;
pub mod report;
pub mod ring;
pub mod session;
pub mod signals;
pub mod unwind;
