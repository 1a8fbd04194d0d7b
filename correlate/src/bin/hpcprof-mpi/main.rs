//! `hpcprof-rs-mpi`: `hpcprof-rs` over MPI ranks (built with `--features mpi`).
//!
//! The same arguments, database and exit statuses as `hpcprof-rs`, whose code it reuses: each
//! rank gathers the first pass over its consecutive share of the profiles
//! ([`correlate::gather_share`]: their metric and module tables and sampled addresses), the
//! partials are merged in a binomial tree reduction (rank r receives from r + 1, r + 2, r + 4,
//! ... as long as r is a multiple of twice the step, so every merge appends a later share to an
//! earlier one and the tables come out in input order), and rank 0 recovers structure once,
//! enriches and writes the database ([`correlate::correlate_gathered`]). An error on any rank
//! travels up the reduction in place of its partial (the first in input order wins); rank 0
//! prints it, and every rank exits with rank 0's status.

#[path = "../hpcprof/cli.rs"]
mod cli;

use std::process::ExitCode;

use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use correlate::{correlate_gathered, gather_share, Partial};

const NAME: &str = "hpcprof-rs-mpi";

fn main() -> ExitCode {
    let args = cli::parse(NAME);
    let Some(universe) = mpi::initialize() else {
        eprintln!("{NAME}: error: MPI was already initialised");
        return ExitCode::from(1);
    };
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let local = cli::setup(&args)
        .and_then(|()| Ok(gather_share(&args.inputs, rank, size)?))
        .map_err(|e| Failure::of(&e));
    let mut status = match reduce(&world, local) {
        None => 0,
        Some(Ok(partial)) => cli::finish(&args, NAME, |o| correlate_gathered(o, partial)),
        Some(Err(f)) => {
            eprintln!("{NAME}: error: {}", f.message);
            f.status
        }
    };
    world.process_at_rank(0).broadcast_into(&mut status);
    ExitCode::from(status)
}

/// An error on some rank, as it travels to rank 0.
struct Failure {
    /// The exit status it calls for.
    status: u8,
    /// The one-line message.
    message: String,
}

impl Failure {
    fn of(e: &anyhow::Error) -> Failure {
        Failure {
            status: cli::exit_status(e),
            message: cli::message(e),
        }
    }
}

/// A rank's result on the wire: 0 and the partial, or 1, the status and the message.
fn encode(result: &Result<Partial, Failure>) -> Vec<u8> {
    match result {
        Ok(p) => [&[0u8][..], &p.to_bytes()].concat(),
        Err(f) => [&[1u8, f.status][..], f.message.as_bytes()].concat(),
    }
}

/// The inverse of [`encode`].
fn decode(bytes: &[u8]) -> Result<Partial, Failure> {
    match bytes {
        [0, partial @ ..] => Partial::from_bytes(partial).map_err(|e| Failure::of(&e.into())),
        [1, status, message @ ..] => Err(Failure {
            status: *status,
            message: String::from_utf8_lossy(message).into_owned(),
        }),
        _ => Err(Failure {
            status: 1,
            message: "an empty message from another rank".into(),
        }),
    }
}

/// Merge every rank's result into rank 0's (binomial tree, see the module documentation);
/// `None` on the other ranks once they have sent theirs.
fn reduce(
    world: &SimpleCommunicator,
    mut result: Result<Partial, Failure>,
) -> Option<Result<Partial, Failure>> {
    let (rank, size) = (world.rank(), world.size());
    let mut step = 1;
    while step < size {
        if rank % (2 * step) != 0 {
            world
                .process_at_rank(rank - step)
                .send(&encode(&result)[..]);
            return None;
        }
        if rank + step < size {
            let (bytes, _) = world.process_at_rank(rank + step).receive_vec::<u8>();
            result = match (result, decode(&bytes)) {
                (Ok(mut mine), Ok(later)) => match mine.merge(later) {
                    Ok(()) => Ok(mine),
                    Err(e) => Err(Failure::of(&e.into())),
                },
                (Err(f), _) | (Ok(_), Err(f)) => Err(f),
            };
        }
        step *= 2;
    }
    Some(result)
}
