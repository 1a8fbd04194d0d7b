//! `--asm PROCEDURE`: the procedure's machine code with its instructions' costs.

use std::io::Write;
use std::path::Path;

use correlate::render::asm;
use correlate::{AsmError, Database};

use crate::args::Args;
use crate::{bad, output, Failure};

/// Print procedure `name`'s code from database `db` (at `path`); returns the summary line.
pub(crate) fn run(args: &Args, db: &Database, path: &Path, name: &str) -> Result<String, Failure> {
    let view = correlate::asm(db, name, &correlate::bundle_stores(db)).map_err(|e| match e {
        AsmError::Unknown(_) | AsmError::Ambiguous(..) => bad(e),
        _ => Failure::Other(e.into()),
    })?;
    let mut out = output::Sink::open(&args.output);
    match args.json {
        true => serde_json::to_writer_pretty(&mut out, &view)
            .map_err(|e| Failure::from(std::io::Error::from(e)))
            .and_then(|()| writeln!(out).map_err(Failure::from))?,
        false => asm::render(&view, &mut out)?,
    }
    out.finish()?;
    let instructions = (view.lines.iter())
        .filter(|l| matches!(l, correlate::AsmLine::Instruction(_)))
        .count();
    Ok(format!(
        "{}: {instructions} instructions of {} (from {})",
        path.display(),
        view.procedure,
        view.binary.display()
    ))
}
