//! Which events the kernel accepts for a run, found by opening each once before the run: the
//! fallbacks (no kernel sampling where it is not permitted, a software clock where there is no
//! PMU, precise memory events as precise as the kernel allows), and why a run could not start.

use crate::format::db::Sampling;
use crate::sampler::capture::events::{self, EventClass, EventSpec, Grouping};
use crate::sampler::capture::groups;
use crate::sampler::capture::launch::LaunchError;
use crate::sampler::capture::perf::{self, AttrOptions, PreciseTuning};

/// Why a measurement could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The command could not be started.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// An event was refused in a way the user can fix (unsupported, bad rate).
    #[error("{0}")]
    Event(String),
    /// Permission refused by the kernel.
    #[error("{0}")]
    Permission(String),
    /// Anything else the system refused.
    #[error("{0}")]
    System(String),
}

/// Decisions taken while probing which events the kernel accepts.
pub(crate) struct Plan {
    pub(crate) specs: Vec<(EventSpec, Option<String>)>,
    pub(crate) kernel: bool,
    pub(crate) precise: PreciseTuning,
    pub(crate) notices: Vec<String>,
}

/// Open every event sampling `spec` once on `pid`, on `cpu` or the first CPU of a PMU that
/// does not cover it, each under its group leader: whether the kernel accepts them.
fn try_open(spec: &EventSpec, opts: &AttrOptions, pid: i32, cpu: i32) -> std::io::Result<()> {
    for open in perf::event_attrs(spec, opts, false) {
        let cpu = match &open.cpus {
            Some(cpus) if !cpus.contains(&cpu) => cpus.first().copied().unwrap_or(cpu),
            _ => cpu,
        };
        let leader = open
            .leader
            .as_ref()
            .map(|l| perf::open(l, pid, cpu))
            .transpose()?;
        perf::open_in_group(&open.attr, pid, cpu, leader.as_ref())?;
    }
    Ok(())
}

/// Open each group of `specs` once on `pid` and `cpu`, its members under its leader: whether
/// the kernel reads groups with samples of inherited events.
fn try_groups(specs: &[EventSpec], opts: &AttrOptions, pid: i32, cpu: i32) -> std::io::Result<()> {
    let mut leader = None;
    for spec in specs {
        let a = perf::attr(spec, opts, false);
        match spec.grouping {
            Grouping::Alone => leader = None,
            Grouping::Leader => leader = Some(perf::open(&a, pid, cpu)?),
            Grouping::Member => {
                perf::open_in_group(&a, pid, cpu, leader.as_ref())?;
            }
        }
    }
    Ok(())
}

/// Find out what the kernel accepts for `specs` on `pid` (first CPU), applying the fallbacks:
/// kernel sampling only where permitted, `cycles` to a software clock where there is no PMU,
/// precise memory events as precise as the kernel lets them be.
pub(crate) fn plan(
    specs: &[EventSpec],
    pid: i32,
    cpu: i32,
    base: AttrOptions,
) -> Result<Plan, RunError> {
    let max_rate = perf::kernel_setting("perf_event_max_sample_rate");
    let mut plan = Plan {
        specs: Vec::new(),
        kernel: true,
        precise: base.precise,
        notices: Vec::new(),
    };
    for &requested in specs {
        if let (Sampling::Frequency(hz), Some(max)) = (requested.sampling, max_rate) {
            if hz as i64 > max {
                return Err(RunError::Event(perf::frequency_too_high(&requested, max)));
            }
        }
        let mut spec = requested;
        let mut replaced = None;
        loop {
            let opts = AttrOptions {
                kernel: plan.kernel,
                precise: plan.precise,
                ..base
            };
            let memory = matches!(spec.event.class, EventClass::Memory(_));
            match try_open(&spec, &opts, pid, cpu) {
                Ok(_) => break,
                Err(e) if perf::is_denied(&e) && plan.kernel => {
                    plan.kernel = false;
                }
                Err(e)
                    if memory
                        && matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP))
                        && plan.precise.lowered().is_some() =>
                {
                    plan.precise = plan.precise.lowered().expect("checked");
                }
                Err(e)
                    if perf::is_unsupported(&e)
                        && spec.event.class == EventClass::Hardware
                        && spec.event.name.ends_with("cycles") =>
                {
                    let clock = events::find(events::FALLBACK_CLOCK).expect("known clock");
                    plan.notices.push(format!(
                        "{} is not available here (no hardware PMU); sampling {} instead",
                        spec.event.name, clock.name
                    ));
                    replaced = Some(spec.event.name.to_string());
                    spec = spec.with_event(clock);
                }
                Err(e) if perf::is_denied(&e) => {
                    return Err(RunError::Permission(perf::explain_open_error(&spec, &e)))
                }
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                    return Err(RunError::System(format!("process {pid} does not exist")))
                }
                Err(e) => return Err(RunError::Event(perf::explain_open_error(&spec, &e))),
            }
        }
        plan.specs.push((spec, replaced));
    }
    if groups::has_group(specs) {
        let opts = AttrOptions {
            kernel: plan.kernel,
            ..base
        };
        let planned: Vec<EventSpec> = plan.specs.iter().map(|(s, _)| *s).collect();
        if let Err(e) = try_groups(&planned, &opts, pid, cpu) {
            plan.notices.push(format!(
                "this kernel does not read an event group with each sample of every thread \
                 ({e}; Linux 6.12 does): sampling the group's events independently instead"
            ));
            let apart = groups::ungrouped(&planned);
            for ((spec, _), alone) in plan.specs.iter_mut().zip(apart) {
                *spec = alone;
            }
        }
    }
    if !plan.kernel && specs.iter().any(|s| s.event.is_off_cpu()) {
        return Err(RunError::Permission(
            concat!(
                "off-cpu needs kernel sampling, which this user may not do here: a switch away ",
                "from the CPU happens in the kernel, so user-only sampling never sees one (run ",
                "as root, or lower kernel.perf_event_paranoid to 1)"
            )
            .to_string(),
        ));
    }
    Ok(plan)
}
