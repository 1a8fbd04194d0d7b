//! `hpcprof-rs-mpi`: `hpcprof-rs` over MPI ranks (built with `--features mpi`).
//!
//! The same arguments, database and exit statuses as `hpcprof-rs`, whose code it reuses, in
//! its stages:
//!
//! 1. each rank gathers the first pass over its consecutive share of the profiles
//!    ([`correlate::gather_share`]: their metric and module tables and sampled addresses);
//! 2. the partials merge in a binomial tree reduction on rank 0 ([`reduce`]);
//! 3. rank 0 finds every module's structure once ([`correlate::prepare`]) and broadcasts it with
//!    the merged tables;
//! 4. each rank enriches its consecutive share of the profiles into a partial tree
//!    ([`correlate::Prepared::enrich_share`]), and the trees merge in a second reduction;
//! 5. rank 0 names data, writes the database and prints the summary
//!    ([`correlate::finish_enriched`]).
//!
//! In each reduction rank r receives from r + 1, r + 2, r + 4, ... as long as r is a multiple
//! of twice the step, so every merge appends a later share to an earlier one and the result
//! comes out in input order: the database is the serial tool's, byte for byte. An error on any
//! rank travels up a reduction in place of its result (the first in input order wins), or is
//! broadcast in place of the structure; rank 0 prints it, and every rank exits with rank 0's
//! status.

#[path = "../hpcprof/cli.rs"]
mod cli;

use std::process::ExitCode;

use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use correlate::{finish_enriched, gather_share, prepare, CorrelateError, Options};
use correlate::{Database, Message, Partial, Share, Summary};

const NAME: &str = "hpcprof-rs-mpi";

fn main() -> ExitCode {
    let args = cli::parse(NAME);
    let Some(universe) = mpi::initialize() else {
        correlate::say_line!("{NAME}: error: MPI was already initialised");
        return ExitCode::from(1);
    };
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let local = cli::setup(&args)
        .and_then(|()| Ok(gather_share(&args.inputs, rank, size)?))
        .map_err(|e| Failure::of(&e));
    let mut status = cli::with_options(&args, |options| {
        match correlate_on(&world, options, local) {
            None => 0,
            Some(Ok(correlated)) => cli::write_or_report(&args, NAME, Ok(correlated)),
            Some(Err(f)) => {
                correlate::say_line!("{NAME}: error: {}", f.message);
                f.status
            }
        }
    });
    world.process_at_rank(0).broadcast_into(&mut status);
    ExitCode::from(status)
}

/// Stages 2 to 5 (see the module documentation) from this rank's first pass, `local`: on rank
/// 0, the database and its summary or the first failure; `None` on the others.
fn correlate_on(
    world: &SimpleCommunicator,
    options: &Options<'_>,
    local: Result<Partial, Failure>,
) -> Option<Result<(Database, Summary), Failure>> {
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let merged = reduce(world, local).map(|p| p.and_then(|p| Ok(prepare(options, p)?)));
    let prepared = match broadcast(world, merged) {
        Ok(prepared) => prepared,
        Err(f) => return (rank == 0).then_some(Err(f)),
    };
    let enriched = prepared.enrich_share(rank, size).map_err(Failure::from);
    let enriched = reduce(world, enriched)?;
    Some(enriched.and_then(|e| Ok(finish_enriched(options, prepared, e)?)))
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

impl From<CorrelateError> for Failure {
    fn from(e: CorrelateError) -> Failure {
        Failure::of(&e.into())
    }
}

/// A result on the wire: 0 and the message, or 1, the status and the error.
fn encode<T: Message>(result: &Result<T, Failure>) -> Vec<u8> {
    match result {
        Ok(m) => [&[0u8][..], &m.to_bytes()].concat(),
        Err(f) => [&[1u8, f.status][..], f.message.as_bytes()].concat(),
    }
}

/// The inverse of [`encode`].
fn decode<T: Message>(bytes: &[u8]) -> Result<T, Failure> {
    match bytes {
        [0, message @ ..] => Ok(T::from_bytes(message)?),
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
fn reduce<T: Share>(
    world: &SimpleCommunicator,
    mut result: Result<T, Failure>,
) -> Option<Result<T, Failure>> {
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
                (Ok(mut mine), Ok(later)) => {
                    mine.merge(later).map(|()| mine).map_err(Failure::from)
                }
                (Err(f), _) | (Ok(_), Err(f)) => Err(f),
            };
        }
        step *= 2;
    }
    Some(result)
}

/// Send rank 0's `result` (`Some` there, `None` elsewhere) to every rank: its length, then its
/// bytes. Rank 0 keeps its own.
fn broadcast<T: Message>(
    world: &SimpleCommunicator,
    result: Option<Result<T, Failure>>,
) -> Result<T, Failure> {
    let root = world.process_at_rank(0);
    let mut bytes = result.as_ref().map(encode).unwrap_or_default();
    let mut len = bytes.len() as u64;
    root.broadcast_into(&mut len);
    bytes.resize(len as usize, 0);
    root.broadcast_into(&mut bytes[..]);
    match result {
        Some(mine) => mine,
        None => decode(&bytes),
    }
}
