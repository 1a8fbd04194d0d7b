//! What a binary says about its data: static variables, the local variables of each function
//! by code address, the layouts of their types, and the receivers of allocations. The
//! correlator uses it to name the data addresses the sampler records (design §4.4-4.5):
//! a static address by the variable holding it ([`DataLayout::static_at`]), a stack address by
//! the local whose frame slot holds it ([`DataLayout::local_at`]), an offset in either by the
//! member or element there ([`DataLayout::part_at`]), a heap block by the variable its
//! allocation's pointer went to ([`DataLayout::receivers`]).
//!
//! ## What is read
//!
//! - **Statics**: `DW_TAG_variable`s located by `DW_OP_addr` / `DW_OP_addrx`: globals,
//!   file statics, function statics (named `counter in f`), C++ class statics and namespace
//!   members (named by their declaration: `Class::member`, `ns::x`). Sizes from the type,
//!   else from the symbol at the same address. The symbol table's `STT_OBJECT` entries
//!   (`.symtab`, the separate debug file's, else `.dynsym`) name what DWARF does not
//!   describe: all of a binary without DWARF, objects built without `-g`. Not read:
//!   thread-local variables (their address is per thread).
//! - **Locals**: per function with code, its inlined functions and lexical blocks (inner
//!   scopes first), the variables and parameters that live in a stack slot at a constant
//!   offset from the canonical frame address (`DW_OP_fbreg` under the frame base
//!   `DW_OP_call_frame_cfa`, GCC's on x86-64) or in a general-purpose register, from
//!   single-operation location expressions or location lists (`.debug_loc`,
//!   `.debug_loclists`) evaluated by address. Not read: functions whose frame base is a
//!   register (clang's `DW_OP_reg7 rsp` at `-O2`, `DW_OP_reg6 rbp` at `-O0`), slots addressed
//!   from a register (`DW_OP_breg7 rsp`), variables split in pieces or computed.
//! - **Types**: the layouts of the types those variables have, as an arena of
//!   [`TypeShape`]s keyed by [`TypeId`]: records with their members' offsets and sizes
//!   (bit-fields and base classes included), arrays (one dimension per level), scalars,
//!   pointers, type units (`DW_FORM_ref_sig8`) in `.debug_info` and split `.dwo` files.
//!
//! DWARF is found as [`crate::analyze_file`] finds it: in the binary, in a separate debug file
//! (build-id, `.gnu_debuglink`), with dwz's supplementary file, compressed sections, split
//! DWARF. A unit that cannot be read is skipped and noted ([`DataLayout::notes`]); a file that
//! is no ELF is an error; nothing panics on bad input.
//!
//! All addresses are link-time addresses of the file ([`Svma`]). The layout derives serde's
//! traits so that callers can cache it (postcard).

mod frames;
mod location;
mod read;
mod receivers;
mod symbols;
mod type_reader;
mod types;
mod walk;

pub use receivers::{Receiver, MAX_INSTRUCTIONS};
pub use types::{Element, Member, Part, TypeId, TypeShape};

use crate::error::StructureError;
use frames::Frames;
use profiler::addr::Svma;
use serde::{Deserialize, Serialize};
use std::path::Path;
use types::TypeArena;

/// What a binary says about its data: static variables, locals per function, type layouts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DataLayout {
    /// Sorted by address, disjoint, none empty.
    statics: Vec<StaticVar>,
    frames: Frames,
    types: TypeArena,
    notes: Vec<String>,
}

/// A static variable: a global, a file or function static, a class static, or a data
/// symbol of the symbol table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StaticVar {
    /// How people write it: `grid`, `Class::member`, `ns::x`, `counter in f`, or the
    /// (demangled) symbol name.
    pub name: String,
    /// Its first byte's link-time address.
    pub addr: Svma,
    /// Its size in bytes (never 0).
    pub size: u64,
    /// The source file declaring it, when DWARF says.
    pub file: Option<String>,
    /// The line declaring it (0 if unknown).
    pub line: u32,
    /// Its type, when DWARF says.
    pub ty: Option<TypeId>,
}

/// A local variable holding a stack address, as [`DataLayout::local_at`] finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalHit<'a> {
    /// The variable (or parameter).
    pub name: &'a str,
    /// The function or inlined function declaring it.
    pub scope: &'a str,
    /// Where the variable starts, in bytes from the frame's CFA (negative).
    pub start: i64,
    /// The address's offset in the variable.
    pub offset: u64,
    /// The variable's size in bytes.
    pub size: u64,
    /// Its type, when DWARF says.
    pub ty: Option<TypeId>,
}

impl DataLayout {
    /// Read from the ELF file at `path`: DWARF where the file or its debug files have it,
    /// completed by the symbol table (module docs). A file without either gives an empty
    /// layout; a file that is not a usable ELF file is an error.
    pub fn read(path: &Path) -> Result<DataLayout, StructureError> {
        read::read(path)
    }

    /// The static variable containing link-time address `addr`, and `addr`'s offset in it.
    pub fn static_at(&self, addr: Svma) -> Option<(&StaticVar, u64)> {
        let i = self
            .statics
            .partition_point(|s| s.addr <= addr)
            .checked_sub(1)?;
        let var = &self.statics[i];
        let offset = addr.0 - var.addr.0;
        (offset < var.size).then_some((var, offset))
    }

    /// Every static variable, sorted by address.
    pub fn statics(&self) -> &[StaticVar] {
        &self.statics
    }

    /// The local variable of the function (or inlined function, or block) executing at `pc`
    /// whose stack slot `[CFA + start, + size)` holds `cfa_offset` (an address minus the
    /// frame's canonical frame address: negative), innermost scope first. `pc` is the
    /// instruction's address; for a caller's frame, its return address minus one.
    pub fn local_at(&self, pc: Svma, cfa_offset: i64) -> Option<LocalHit<'_>> {
        let found = self.frames.in_frame(pc.0, cfa_offset)?;
        Some(LocalHit {
            name: &found.var.name,
            scope: found.scope,
            start: found.start,
            offset: (cfa_offset - found.start) as u64,
            size: found.var.size,
            ty: found.var.ty,
        })
    }

    /// The name of the function or innermost inlined function executing at `pc` (as the
    /// scope tree names procedures and inlined calls), for `<frame of f>` when no local holds
    /// an address. Only functions that DWARF describes.
    pub fn frame_name(&self, pc: Svma) -> Option<&str> {
        self.frames.frame_name(pc.0)
    }

    /// The member or element of a value of type `ty` holding byte `offset`: down through
    /// members (`a.b`) and array elements (`hot[5]`, `cells[12].hot`) to a scalar or pointer,
    /// or to where the way down is not unique (overlapping union members). `None` for an
    /// offset outside the value, or in a type without parts there.
    pub fn part_at(&self, ty: TypeId, offset: u64) -> Option<Part> {
        self.types.part_at(ty, offset)
    }

    /// The shape of type `ty`: to list every member of an object, sampled or not.
    pub fn type_shape(&self, ty: TypeId) -> Option<&TypeShape> {
        self.types.get(ty)
    }

    /// How type `ty` prints: its name, or an array's element type with the dimensions
    /// (`double[10][20]`).
    pub fn type_name(&self, ty: TypeId) -> String {
        self.types.name_of(ty)
    }

    /// What could not be read (a unit, a debug file, a section), one line each.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// How much was read: (statics, scopes with code, locals, type shapes).
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        let (scopes, locals) = self.frames.counts();
        (self.statics.len(), scopes, locals, self.types.len())
    }
}
