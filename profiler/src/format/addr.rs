//! Address spaces, as distinct types so they cannot be mixed by accident.
//!
//! A runtime address in the measured process ([`Avma`]) becomes a link-time address in the
//! module's file ([`Svma`]) in exactly one place: the load map (`loadmap`). Everything stored in
//! `profile.db` is an `Svma`.

use serde::{Deserialize, Serialize};

/// A runtime ("actual") virtual memory address in the measured process. `profile.db` keeps
/// one only for code in no known module ([`crate::format::db::Frame::Unmapped`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
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

/// What code that treats both address spaces alike (the `ra - 1` rule of
/// [`crate::format::db::AddrKind::lookup`]) needs of an address; each space stays its own type.
pub trait Address: Copy {
    /// The address `n` bytes lower in the same space, stopping at zero.
    fn saturating_sub(self, n: u64) -> Self;
}

/// Both spaces: `{:x}` and `{:#x}` print the bare address, as for a `u64`.
macro_rules! address_space {
    ($($space:ident),*) => {$(
        impl Address for $space {
            fn saturating_sub(self, n: u64) -> Self {
                $space(self.0.saturating_sub(n))
            }
        }

        impl std::fmt::LowerHex for $space {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::LowerHex::fmt(&self.0, f)
            }
        }
    )*};
}

address_space!(Avma, Svma);
