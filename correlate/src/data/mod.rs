//! Data-centric analysis: the data references `hpcrun-rs --data` recorded, named as data
//! objects (statics and locals through DWARF or symbols, heap blocks by allocation context) and
//! projected into the data views of `hpcview-rs` (objects, object -> code, code -> objects,
//! fields, delinquent instructions, allocation sites).
//!
//! `model` holds what the database stores, `build` makes it from profiles during correlation
//! (`heap_name` names heap objects, `variables` reads the modules' variables, `instructions`
//! decodes what the accessing instructions do with memory). `views`, `fields`,
//! `delinquent` (instructions ranked by data cost), `alloc` (allocation sites) and
//! `footprint` (distinct pages and regions per procedure) and `memmap` (the traced data
//! samples by time slice, object and page) are the views.

mod alloc;
mod build;
mod delinquent;
mod fields;
mod footprint;
mod heap_name;
mod instructions;
mod memmap;
mod model;
mod variables;
mod views;

pub use alloc::{alloc_notice, alloc_view, AllocRow, AllocView};
pub(crate) use build::{DataBuilder, ProfileInput};
pub use delinquent::{delinquent_notice, delinquent_view, DelinquentRow, DelinquentView};
pub use fields::{fields, find_objects, FieldTable, PartRow, DEFAULT_ROWS};
pub use footprint::{footprint, FootprintRow, REGIONS};
pub(crate) use instructions::decode_accesses;
pub use memmap::{memmap, MapObject, MapRow, MemMap};
pub use model::{
    AllocStats, DataAccess, DataCounts, DataObject, DataObjectId, DataSection, Field, Instruction,
    Layout, MemoryOp, ObjectKind, SiteCounts,
};
pub(crate) use variables::Variables;
pub use views::{code_data, object_tree, objects, ObjectRow, ObjectTable};
