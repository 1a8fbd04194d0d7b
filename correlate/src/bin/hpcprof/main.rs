//! `hpcprof-rs`: correlate sampled calling contexts with program structure into a database.

mod cli;

use std::process::ExitCode;

const NAME: &str = "hpcprof-rs";

fn main() -> ExitCode {
    let args = cli::parse(NAME);
    let status = match cli::setup(&args) {
        Ok(()) => cli::finish(&args, NAME, correlate::correlate),
        Err(e) => cli::report(NAME, &e),
    };
    ExitCode::from(status)
}
