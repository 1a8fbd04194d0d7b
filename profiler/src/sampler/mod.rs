//! The sampler (feature `sampler`): `hpcrun-rs`'s measurement, behind [`session::run`]. Its
//! rooms, each using only those before it: `capture` (the command launched, the events'
//! attributes, the rings emptied by the copier), `unwinding` (load map, images, stack walks,
//! calling-context trees), `python` (Python's frames read at each sample and spliced into the
//! native path), `data` (data addresses, allocations, effective addresses, precise
//! memory samples), `record` (the `Recorder`, which takes each record through the rooms above),
//! `watch` (hardware watchpoints) and `results` (the summary and the file). `session` runs a
//! measurement; `open_events` opens the planned events and probes, `sources` puts the sources of
//! records (perf rings, allocation shim, watchpoints) behind one trait and merges them into one
//! time order for the recorder.

pub(crate) mod capture;
pub(crate) mod data;
pub(crate) mod open_events;
pub(crate) mod python;
pub(crate) mod record;
pub(crate) mod results;
pub mod session;
pub(crate) mod sources;
pub(crate) mod unwinding;
pub mod watch;
