//! # structure: program structure of optimized x86-64 ELF binaries
//!
//! This crate recovers the static structure of a binary or shared library (procedures, code
//! inlined into them, loop nests and source lines) and represents it as one [`ScopeTree`] per
//! load module, the model HPCToolkit's `hpcstruct` writes and `hpcprof` reads. It serves two
//! callers: the `hpcstruct-rs` binary, which writes the tree as an HPCToolkit structure file,
//! and `hpcprof-rs`, which maps sampled addresses to their static context.
//!
//! ## What it reads
//!
//! The caller gives a path ([`analyze_file`]). Procedures come from DWARF and the symbol table,
//! inlined calls from `DW_TAG_inlined_subroutine` records (named by following abstract origins
//! and specifications across units, into dwz's supplementary files too, as the addr2line
//! crate does; from the `.dwo` files or `.dwp` package of split DWARF), lines from the line tables, loops from the decoded code. Where DWARF has line tables but no inline records (an old compiler,
//! `.debug_info` stripped down to `.debug_line`, a corrupt unit), inlined code is inferred from
//! procedure bounds and the line map (the thesis's fallback). A corrupt unit is
//! skipped and reported in [`Summary::skipped`]; bad files give a [`StructureError`] naming
//! the file, never a panic.
//!
//! ## Whole module or focused
//!
//! [`analyze_file`] builds every procedure of the module. [`analyze_focused`] takes the path
//! and a set of link-time addresses (a profile's samples and return addresses) and builds only
//! the procedures holding them, reading only the DWARF units whose address ranges meet them:
//! for a profile that touches a few dozen procedures of libc, a small fraction of the work.
//! For every asked address its tree answers exactly as the whole-module tree does (same
//! procedure, inlined calls, loops, line); [`Analysis::coverage`] says which addresses that
//! holds for, so a caller can cache the tree and know when it still serves.
//!
//! ## The scope tree
//!
//! [`ScopeTree`] is an arena of [`Scope`]s with parent links (module > file > procedure >
//! inlined calls / loops / statements). Addresses are link-time addresses of the file (SVMA):
//! what a caller asks about is typed [`Svma`](profiler::addr::Svma) (the `profile.db` format's
//! own type, from `profiler` built without its sampler), while the tree's ranges and the
//! analysis inside keep them as plain `u64`, all in that one space.
//! [`ScopeTree::lookup`] maps an address to the innermost scope holding it (a statement) and
//! [`ScopeTree::ancestors`] walks from there up to its procedure: that walk *is* the static
//! context of a sample (procedure frame, inlined frames, loops, line). The tree derives serde's
//! traits so callers can cache it (e.g. with postcard).
//!
//! ```
//! use profiler::addr::Svma;
//! use structure::{Scope, ScopeKind, ScopeTree};
//! let mut tree = ScopeTree::new("/usr/bin/app");
//! let mut proc_ = Scope::new(ScopeKind::Procedure);
//! proc_.name = "main".into();
//! proc_.entry = Some(0x1140);
//! let p = tree.add(tree.root(), proc_);
//! let mut stmt = Scope::new(ScopeKind::Statement);
//! stmt.line = 12;
//! stmt.ranges = vec![0x1140..0x1150];
//! let s = tree.add(p, stmt);
//! tree.finish();
//! assert_eq!(tree.lookup(Svma(0x1148)), Some(s));
//! assert_eq!(tree.ancestors(s).collect::<Vec<_>>(), vec![p]);
//! ```
//!
//! ## The program's data
//!
//! [`DataLayout::read`] reads what the same binary says about its data, for naming the data
//! addresses a profile records: static variables (DWARF, else the symbol table) with
//! [`DataLayout::static_at`], local variables by code address and offset from the frame's
//! canonical frame address with [`DataLayout::local_at`], the member or array element at an
//! offset of a typed value with [`DataLayout::part_at`], and the variable an allocation's
//! pointer goes to ([`DataLayout::receivers`]). It is serde-serializable for caching too.

#![deny(missing_docs)]

mod aliens;
mod analysis;
mod analyze;
mod assemble;
mod binary;
pub mod cfg;
mod debuginfo;
pub mod debuginfod;
mod demangle;
mod dwarf;
mod dwofiles;
mod error;
mod focus;
mod identity;
mod imports;
mod landing;
mod loopnest;
pub mod loops;
mod noreturn;
mod normalize;
mod parts;
mod plan;
mod plt;
mod procedure;
mod ranges;
mod reader;
mod scope;
mod variables;
pub mod verify;
mod writer;

pub use analysis::{
    Analysis, Coverage, DebugSource, Heuristics, IrreducibleLoop, Options, Summary,
};
pub use analyze::{
    analyze_file, analyze_file_with, analyze_focused, analyze_focused_with, line_table_addresses,
};
pub use binary::mini_debuginfo;
pub use error::{one_line, StructureError};
pub use identity::BinaryIdentity;
pub use ranges::normalize_ranges;
pub use reader::{read_structure, read_structure_file};
pub use scope::{Ancestors, FileId, Scope, ScopeId, ScopeKind, ScopeTree};
pub use variables::{
    DataLayout, Element, LocalHit, Member, Part, Receiver, StaticVar, TypeId, TypeShape,
    MAX_INSTRUCTIONS,
};
pub use writer::{write_structure, write_structure_file};
