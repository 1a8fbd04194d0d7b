//! Where hpcview-rs writes: standard output, through a pager when that is a terminal (`$PAGER`,
//! else `less -FRX`, as git does), or a file named with `-o` (written whole at the end, atomically,
//! never through a symlink).

use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};

use anyhow::anyhow;
use profiler::envelope::{write_atomically_with, Replace};

use crate::args::ColorChoice;
use crate::Failure;

/// The output flags.
#[derive(Debug, clap::Args)]
pub(crate) struct OutputArgs {
    /// Write the output to FILE instead of standard output (any output form; FILE is replaced
    /// whole once the output is complete)
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,

    /// Do not page: by default, output to a terminal goes through $PAGER (or `less -FRX`)
    #[arg(long)]
    pub(crate) no_pager: bool,
}

/// An open output.
pub(crate) enum Sink {
    Stdout(BufWriter<io::Stdout>),
    Pager(Child, BufWriter<ChildStdin>),
    File(PathBuf, Vec<u8>),
}

impl Sink {
    /// The output `args` ask for.
    pub(crate) fn open(args: &OutputArgs) -> Sink {
        if let Some(path) = &args.output {
            return Sink::File(path.clone(), Vec::new());
        }
        let stdout = io::stdout();
        if stdout.is_terminal() && !args.no_pager {
            if let Some((child, stdin)) = pager() {
                return Sink::Pager(child, BufWriter::new(stdin));
            }
        }
        Sink::Stdout(BufWriter::new(stdout))
    }

    /// Whether to colour: as `choice` says, and in `auto` when a person reads the output.
    pub(crate) fn colour(&self, choice: ColorChoice) -> bool {
        let terminal = !matches!(self, Sink::File(..)) && io::stdout().is_terminal();
        crate::use_colour(choice, terminal)
    }

    /// Complete the output: flush, wait for the pager, or write the file.
    pub(crate) fn finish(self) -> Result<(), Failure> {
        match self {
            Sink::Stdout(mut out) => Ok(out.flush()?),
            Sink::Pager(mut child, mut out) => {
                // A reader who quits the pager early is not a failure.
                let _ = out.flush();
                drop(out);
                child.wait()?;
                Ok(())
            }
            Sink::File(path, bytes) => {
                write_atomically_with(&path, Replace::Allowed, |w| w.write_all(&bytes))
                    .map_err(|e| Failure::Other(anyhow!(e).context("writing the output file")))
            }
        }
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sink::Stdout(out) => out.write(buf),
            Sink::Pager(_, out) => out.write(buf),
            Sink::File(_, bytes) => bytes.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Stdout(out) => out.flush(),
            Sink::Pager(_, out) => out.flush(),
            Sink::File(..) => Ok(()),
        }
    }
}

/// Start the pager: `$PAGER` through the shell (it may carry arguments), `less -FRX` when unset;
/// none when `$PAGER` is empty or `cat`, or when it cannot be started.
fn pager() -> Option<(Child, ChildStdin)> {
    let command = std::env::var("PAGER").unwrap_or_else(|_| "less -FRX".into());
    if command.trim().is_empty() || command.trim() == "cat" {
        return None;
    }
    let mut child = Command::new("/bin/sh")
        .args(["-c", &command])
        .stdin(Stdio::piped())
        .spawn()
        .ok()?;
    let stdin = child.stdin.take()?;
    Some((child, stdin))
}
