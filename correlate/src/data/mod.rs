//! Data-centric analysis: the data references `hpcrun-rs --data` recorded, named as data
//! objects (statics and locals through DWARF or symbols, heap blocks by allocation context) and
//! projected into the data views of `hpcview-rs` (objects, object -> code, code -> objects,
//! fields, delinquent instructions, allocation sites).
//!
//! `model` holds what the database stores, `build` makes it from profiles during correlation
//! (`heap_name` names heap objects, `variables` reads the modules' variables).

mod build;
mod heap_name;
mod model;
mod variables;

pub(crate) use build::{DataBuilder, ProfileInput};
pub use model::{
    AllocStats, DataAccess, DataCounts, DataObject, DataObjectId, DataSection, Field, Layout,
    ObjectKind,
};
pub(crate) use variables::Variables;
