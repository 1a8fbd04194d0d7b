//! What a run leaves: the profile written safely beside others of the same job, and the summary
//! the user reads.

pub mod bundling;
pub mod measurements;
pub mod output;
pub mod report;
pub mod report_data;
