//! `hpcprof-rs`: correlate sampled calling contexts with program structure into a database.

mod cli;

use std::process::ExitCode;

const NAME: &str = "hpcprof-rs";

fn main() -> ExitCode {
    let args = cli::parse(NAME);
    let status = match cli::setup(&args) {
        Ok(()) => {
            let correlated = cli::with_options(&args, correlate::correlate);
            cli::write_or_report(&args, NAME, correlated.map_err(Into::into))
        }
        Err(e) => cli::report(NAME, &e),
    };
    ExitCode::from(status)
}
