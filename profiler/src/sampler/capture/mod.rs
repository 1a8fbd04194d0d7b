//! Capture: the command launched and held before `exec`, the events planned and their
//! attributes, the rings emptied by the copier thread, and signals caught. It uses only the
//! format.

pub(crate) mod event_plan;
pub mod events;
pub mod groups;
pub mod hold;
pub mod java;
pub mod launch;
pub(crate) mod memory;
pub(crate) mod ompt;
pub mod perf;
pub mod pmu;
pub(crate) mod priority;
pub mod python;
pub(crate) mod ring;
pub(crate) mod signals;
