//! # correlate: the correlation stage of hpctoolkit-rs (`hpcprof-rs`, `hpcview-rs`)
//!
//! `hpcrun-rs` records *where* samples landed as calling-context trees of bare addresses
//! (`profile.db`). This crate turns them into something a person can read: every address is
//! expanded into its static context (procedure frame, inlined frames outermost first with their
//! call sites, loops, source line) using the program structure recovered by the `structure`
//! crate, sibling contexts that land in the same scope merge, and the result is one
//! **database** holding the enriched tree, which the three views project.
//!
//! **What the caller provides:** one or more `profile.db` files (read with
//! [`profiler::db::Profile::read`]), and optionally structure files; modules without one are
//! analysed on the fly (in parallel) and cached on disk.
//!
//! **What it gives back:** a [`database::Database`] (written to and read from a single
//! versioned file), and [`projection`]'s functions that compute, from it, the inclusive and
//! exclusive cost of every node and the top-down, callers and flat trees, with HPCToolkit's
//! semantics (exclusive of a procedure includes its inlined code and loops but not its calls;
//! in the callers and flat views only the outermost instance of a recursive procedure counts).
//! Views only present these trees; they compute nothing.
//!
//! Address conventions: a leaf address is the sampled instruction; every interior address is a
//! return address, looked up at `ra - 1` so that a call at the end of a function is attributed
//! to its call instruction.
//!
//! ```no_run
//! use correlate::database::{Database, Selection};
//! use correlate::projection;
//!
//! let db = Database::read(std::path::Path::new("profile.hpcdb"))?;
//! let tree = projection::top_down(&db, &Selection::All);
//! for (_, child) in tree.children(0) {
//!     println!("{} {}", child.name, child.incl[0].value);
//! }
//! # Ok::<(), correlate::database::DatabaseError>(())
//! ```

pub mod cache;
pub mod correlation;
pub mod database;
pub mod enrich;
pub mod error;
pub mod inputs;
pub mod projection;
pub mod render;
pub mod viewtree;
