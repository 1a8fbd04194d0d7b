//! The data side of a run (`--data`): data addresses classified against the live heap, the
//! allocation shim's records and the uprobes that stand in for it, effective addresses of the
//! sampled instructions, and precise memory samples.

pub mod alloc;
pub(crate) mod datarec;
pub(crate) mod datatrace;
pub(crate) mod ea;
pub(crate) mod liveheap;
pub mod sample;
pub(crate) mod tracking;
pub(crate) mod uprobes;
