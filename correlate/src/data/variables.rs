//! The variables of the modules a profile's data references point into, read once per module
//! (in parallel) from their DWARF or symbol tables (`structure::DataLayout`), and the answers
//! the data builder asks of them: which static holds an address, which local a frame offset.

use profiler::addr::Svma;

use super::model::Layout;
use crate::ids::DbModuleId;

/// A variable found for an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VarHit {
    /// Display name: `A`, `counter in f`, `deep::lbuf`.
    pub(crate) name: String,
    /// A static's link-time address; a local's offset from the CFA.
    pub(crate) start: u64,
    /// Bytes from the variable's start.
    pub(crate) offset: i64,
    /// Size in bytes.
    pub(crate) size: u64,
    /// Declaration file and line.
    pub(crate) file: Option<String>,
    /// See [`VarHit::file`].
    pub(crate) line: Option<u32>,
    /// Parts of its type.
    pub(crate) layout: Option<Layout>,
}

/// The modules' variables.
#[derive(Debug, Default)]
pub(crate) struct Variables {}

impl Variables {
    /// The static variable of `module` holding link-time address `addr`.
    pub(crate) fn static_at(&self, _module: DbModuleId, _addr: Svma) -> Option<VarHit> {
        None
    }

    /// The local of the function executing at `pc` in `module` covering `cfa_offset`.
    pub(crate) fn local_at(
        &self,
        _module: DbModuleId,
        _pc: Svma,
        _cfa_offset: i64,
    ) -> Option<VarHit> {
        None
    }
}
