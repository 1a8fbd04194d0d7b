//! Data-centric analysis: the data references `hpcrun-rs --data` recorded, named as data
//! objects (statics and locals through DWARF or symbols, heap blocks by allocation context) and
//! projected into the data views of `hpcview-rs` (objects, object -> code, code -> objects,
//! fields, delinquent instructions, allocation sites).
//!
//! What the database stores is `db::data`; correlation builds it (`prof::data`). Here are the
//! views: `views`, `fields`,
//! `delinquent` (instructions ranked by data cost), `alloc` (allocation sites) and
//! `footprint` (distinct pages and regions per procedure) and `memmap` (the traced data
//! samples by time slice, object and page) are the views.

mod alloc;
mod delinquent;
mod fields;
mod footprint;
mod memmap;
mod views;

pub use alloc::{alloc_notice, alloc_view, AllocRow, AllocView};
pub use delinquent::{delinquent_notice, delinquent_view, DelinquentRow, DelinquentView};
pub use fields::{fields, find_objects, FieldTable, PartRow, DEFAULT_ROWS};
pub use footprint::{footprint, FootprintRow, REGIONS};
pub use memmap::{memmap, MapObject, MapRow, MemMap};
pub use views::{code_data, object_tree, objects, ObjectRow, ObjectTable};
