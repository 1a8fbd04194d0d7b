//! Where a run sits in a parallel job: the rank and job id that MPI launchers and batch systems
//! hand each process in its environment.
//!
//! `mpirun -np 64 hpcrun-rs ./app` starts 64 copies of `hpcrun-rs`; each learns its rank from
//! the launcher's variables (Open MPI, PMIx, MPICH's PMI, Slurm), names its profile after it,
//! and records it in the profile so that `hpcprof-rs` and `hpcview-rs` can speak of "rank 12"
//! rather than of the twelfth file. The measured command inherits the same environment, so
//! the rank is the one its MPI library will report.

use serde::{Deserialize, Serialize};

/// Variables holding the process's rank, most specific first: Open MPI's own, PMIx's (Open MPI
/// 4/5, Slurm with PMIx), PMI's (MPICH, Intel MPI, Slurm with PMI-2), then Slurm's task id.
pub const RANK_VARIABLES: [&str; 4] = [
    "OMPI_COMM_WORLD_RANK",
    "PMIX_RANK",
    "PMI_RANK",
    "SLURM_PROCID",
];

/// Variables holding the job's id, the batch system's first (what its user knows the job by):
/// Slurm's, then Open MPI's job id, then the PMIx namespace.
pub const JOB_VARIABLES: [&str; 3] = ["SLURM_JOB_ID", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"];

/// The longest job id kept (a PMIx namespace can be long; it ends up in a directory name).
const MAX_JOB_ID: usize = 64;

/// A run's place in a parallel job; both parts are absent for a run outside any launcher.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobPlace {
    /// The process's rank (MPI rank or Slurm task id).
    pub rank: Option<u32>,
    /// The job's id, reduced to characters safe in a file name (`[A-Za-z0-9._-]`).
    pub job: Option<String>,
}

impl JobPlace {
    /// The place described by the process's environment.
    pub fn from_env() -> JobPlace {
        JobPlace::from_vars(|name| std::env::var(name).ok())
    }

    /// The place described by `var` (a variable's value by name): the first rank variable that
    /// holds a decimal number, and the first non-empty job variable.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> JobPlace {
        let rank = RANK_VARIABLES
            .iter()
            .find_map(|name| var(name)?.trim().parse().ok());
        let job = JOB_VARIABLES
            .iter()
            .filter_map(|name| var(name))
            .map(|v| safe_name(v.trim()))
            .find(|v| !v.is_empty());
        JobPlace { rank, job }
    }
}

/// `text` with every character outside `[A-Za-z0-9._-]` replaced by `_`, at most
/// [`MAX_JOB_ID`] characters, and never `.` or `..`.
fn safe_name(text: &str) -> String {
    let name: String = text
        .chars()
        .take(MAX_JOB_ID)
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.chars().all(|c| c == '.') {
        name.replace('.', "_")
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(vars: &[(&str, &str)]) -> JobPlace {
        JobPlace::from_vars(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn launchers_variables_give_rank_and_job() {
        assert_eq!(place(&[]), JobPlace::default());
        // Open MPI under mpirun sets both its own rank and PMIx's; its own wins.
        let ompi = place(&[
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("PMIX_RANK", "3"),
            ("OMPI_MCA_ess_base_jobid", "248840193"),
            ("PMIX_NAMESPACE", "248840193"),
        ]);
        assert_eq!(ompi.rank, Some(3));
        assert_eq!(ompi.job.as_deref(), Some("248840193"));
        // MPICH's PMI and Slurm: the batch job id is preferred to a namespace.
        let slurm = place(&[
            ("PMI_RANK", "12"),
            ("SLURM_PROCID", "12"),
            ("SLURM_JOB_ID", "4711"),
            ("PMIX_NAMESPACE", "slurm.pmix.4711.0"),
        ]);
        assert_eq!((slurm.rank, slurm.job.as_deref()), (Some(12), Some("4711")));
        // A value that is not a rank is skipped for the next variable.
        assert_eq!(
            place(&[("PMIX_RANK", "x"), ("SLURM_PROCID", "7")]).rank,
            Some(7)
        );
    }

    #[test]
    fn job_ids_are_safe_in_file_names() {
        let odd = place(&[("PMIX_NAMESPACE", "prterun-node/1@../x y")]);
        assert_eq!(odd.job.as_deref(), Some("prterun-node_1_.._x_y"));
        assert_eq!(place(&[("SLURM_JOB_ID", "..")]).job.as_deref(), Some("__"));
        let long = "9".repeat(200);
        let job = place(&[("SLURM_JOB_ID", &long)]).job.unwrap();
        assert_eq!(job.len(), MAX_JOB_ID);
    }
}
