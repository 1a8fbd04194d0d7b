//! Address spaces, as distinct types so they cannot be mixed by accident.
//!
//! A runtime address in the measured process ([`Avma`]) becomes a link-time address in the
//! module's file ([`Svma`]) in exactly one place: the load map (`loadmap`). Everything stored in
//! `profile.db` is an `Svma`.

use serde::{Deserialize, Serialize};

/// A runtime ("actual") virtual memory address in the measured process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Avma(pub u64);

/// A link-time ("stated") virtual memory address: the address the instruction has in the ELF
/// file's own program headers, the one DWARF, symbol tables and structure files use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Svma(pub u64);

impl std::fmt::Display for Svma {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}
