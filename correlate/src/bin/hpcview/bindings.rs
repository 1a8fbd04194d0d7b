//! `hpcview-rs --bindings`: the producer -> consumer matrix of a database measured with
//! `hpcrun-rs --watch`, as a table, JSON, Graphviz dot (`--dot FILE`) or QUAD's XML
//! (`--quad-xml FILE`).

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::anyhow;
use correlate::bindings::{self, Bindings};
use correlate::Database;
use profiler::envelope::{write_atomically_with, Replace};

use crate::{bad, Failure};

/// The producer/consumer flags.
#[derive(Debug, clap::Args)]
pub(crate) struct BindingArgs {
    /// Producer -> consumer bindings (QUAD): bytes each function read that another wrote, and
    /// the unique addresses, exact for `hpcrun-rs --watch VAR` (with reads and writes by
    /// function), estimated with their standard error for `--watch sample`
    #[arg(long)]
    pub(crate) bindings: bool,

    /// With --bindings: also write the bindings as a Graphviz dot graph to FILE
    #[arg(long, value_name = "FILE", requires = "bindings")]
    pub(crate) dot: Option<PathBuf>,

    /// With --bindings: also write the bindings in QUAD's XML format to FILE
    #[arg(long, value_name = "FILE", requires = "bindings")]
    pub(crate) quad_xml: Option<PathBuf>,

    /// With --bindings: leave out data on stacks (QUAD's -ignore_stack_access)
    #[arg(long, requires = "bindings")]
    pub(crate) no_stack: bool,
}

/// A renderer of the bindings into a file.
type Render = fn(&Bindings, &mut dyn Write) -> io::Result<()>;

/// Print the bindings (as JSON with `json`) and write the files asked for; returns the
/// summary line.
pub(crate) fn run(
    args: &BindingArgs,
    json: bool,
    db: &Database,
    path: &Path,
) -> Result<String, Failure> {
    let Some(b) = bindings::bindings(db, args.no_stack) else {
        let why = "has no watchpoint results (measure with `hpcrun-rs --watch VAR|sample`)";
        return Err(bad(anyhow!("{}: {why}", path.display())));
    };
    let files: [(&Option<PathBuf>, Render, &str); 2] = [
        (&args.dot, bindings::render_dot, "--dot"),
        (&args.quad_xml, bindings::render_quad_xml, "--quad-xml"),
    ];
    for (file, render, flag) in files {
        if let Some(file) = file {
            write_atomically_with(file, Replace::Allowed, |out| render(&b, out)).map_err(|e| {
                Failure::Other(anyhow!(e).context(format!("writing the {flag} file")))
            })?;
        }
    }
    let mut out = BufWriter::new(io::stdout().lock());
    match json {
        true => bindings::render_json(&b, &mut out)?,
        false => bindings::render_text(&b, &mut out)?,
    }
    out.flush()?;
    let kind = if b.exact { "exact" } else { "estimated" };
    Ok(format!(
        "bindings of {}: {} producer -> consumer pairs ({kind})",
        path.display(),
        b.rows.len()
    ))
}
