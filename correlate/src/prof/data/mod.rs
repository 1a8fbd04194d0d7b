//! The data section built while correlating: each profile's data samples and allocations
//! charged to the objects they touched (`build`), named from the binaries' variables
//! (`variables`), and the memory instructions of the sampled code decoded (`instructions`).

mod build;
mod instructions;
mod variables;

pub(crate) use build::{DataBuilder, ProfileInput};
pub(crate) use instructions::decode_accesses;
pub(crate) use variables::Variables;
