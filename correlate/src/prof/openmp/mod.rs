//! OpenMP programs as their authors see them: each worker thread's share of a parallel region
//! grafted under the master's call to the runtime that ran it, and the runtime's waiting
//! measured as an `omp-idle` metric and blamed on the region or serial code it waited for.
//!
//! Runtimes without a tools interface (GCC's `libgomp`) give no region identities, so the tree
//! itself says what ran where ([`shape`]): a master's path reads `... > caller > GOMP_parallel >
//! f._omp_fn.0`, a worker's `start_thread > (runtime) > f._omp_fn.0`. A body run from one
//! calling context is grafted there whole; where several contexts run the same body, each
//! traced sample (`hpcrun-rs` traces every program that maps an OpenMP runtime) is placed by the
//! master's samples nearest in time ([`placing`]), and what the evidence does not settle goes
//! under `<unplaced parallel work>`, counted in the summary ([`moving`]). Then each explicit
//! task goes under the call that created it, wherever a thread ran it ([`tasks`]).

mod moving;
mod placing;
mod regions;
mod runtime;
mod shape;
mod spin;
mod tasks;

use std::path::PathBuf;

use profiler::db::Cost;

use crate::db::database::{Database, MetricDesc};
use crate::db::ids::DbModuleId;
use crate::prof::openmp::moving::Mover;
use crate::prof::openmp::placing::Placements;
use crate::prof::openmp::shape::Shape;

/// The metric grafting adds for the time the runtime spent waiting, in the first metric's unit:
/// spinning, and asleep (all its time off the CPU) where `off-cpu` was measured in that unit
/// too.
pub const IDLE_METRIC: &str = "omp-idle";
/// The metric grafting adds for the runtime's own work (handing out loop chunks, creating
/// tasks, starting teams), in the first metric's unit.
pub const OVERHEAD_METRIC: &str = "omp-overhead";

/// What grafting did, for the summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Grafted {
    /// Parallel regions found (runtime entries that ran a body).
    pub regions: usize,
    /// Worker samples in outlined bodies, and those placed under their region.
    pub body_samples: u64,
    /// See [`Grafted::body_samples`].
    pub placed_samples: u64,
    /// Worker samples waiting outside any body, and those blamed on the master's context.
    pub waiting_samples: u64,
    /// See [`Grafted::waiting_samples`].
    pub blamed_samples: u64,
    /// Samples in explicit tasks' bodies, wherever they ran, and those placed under the call
    /// that created their task.
    pub task_samples: u64,
    /// See [`Grafted::task_samples`].
    pub tasks_at_creation: u64,
    /// Samples of the runtime waiting, anywhere.
    pub idle_samples: u64,
    /// Samples of the runtime's own work, anywhere.
    pub overhead_samples: u64,
}

impl Grafted {
    /// One line for `hpcprof-rs`'s summary.
    pub fn line(&self) -> String {
        let unplaced = (self.body_samples - self.placed_samples)
            + (self.waiting_samples - self.blamed_samples);
        format!(
            "OpenMP: {} parallel regions; {} of {} worker samples grafted under their regions, \
             {} of {} waiting ones blamed on the master's context, {unplaced} under {}; \
             {} samples idle ({IDLE_METRIC}), {} in the runtime's own work ({OVERHEAD_METRIC}); \
             {} of {} samples of explicit tasks under the call that created them",
            self.regions,
            self.placed_samples,
            self.body_samples,
            self.blamed_samples,
            self.waiting_samples,
            moving::UNPLACED,
            self.idle_samples,
            self.overhead_samples,
            self.tasks_at_creation,
            self.task_samples,
        )
    }
}

/// Graft the worker threads of `db`'s OpenMP programs under their regions and add the
/// `omp-idle` and `omp-overhead` metrics; `None` (and `db` unchanged) where no module is an
/// OpenMP runtime. `binaries` holds each module's file on this machine (`None` where it has
/// none): the runtime's code is read from it to tell its spin-waits.
pub fn graft(db: &mut Database, binaries: &[Option<PathBuf>]) -> Option<Grafted> {
    let runtime: Vec<bool> = (db.modules.iter())
        .map(|m| profiler::openmp::is_runtime(&m.path))
        .collect();
    let idle_module = runtime
        .iter()
        .position(|&r| r)
        .map(DbModuleId::from_index)?;
    let first = db.metrics.first()?;
    let (unit, sampling) = (first.unit.clone(), first.sampling);
    let shape = Shape::of(db, &runtime, binaries);
    let placements = Placements::of(db, &shape);
    let nodes = db.nodes.len();
    let idle_metric = db.add_metric(MetricDesc::new(IDLE_METRIC, unit.clone(), sampling));
    db.add_metric(MetricDesc::new(OVERHEAD_METRIC, unit, sampling));
    let moved = Mover::new(db, &shape, idle_metric, Some(idle_module)).move_all(nodes, &placements);
    db.prune();
    let tasks = tasks::place(db, &runtime);
    db.prune();
    db.compute_totals();
    let (idle, overhead): (Cost, Cost) = (
        db.metrics[idle_metric].total,
        db.metrics[idle_metric + 1].total,
    );
    Some(Grafted {
        regions: shape.region.iter().filter(|&&r| r).count(),
        body_samples: moved.body_samples,
        placed_samples: moved.placed_samples,
        waiting_samples: moved.waiting_samples,
        blamed_samples: moved.blamed_samples,
        idle_samples: idle.samples,
        overhead_samples: overhead.samples,
        task_samples: tasks.samples,
        tasks_at_creation: tasks.at_creation,
    })
}
