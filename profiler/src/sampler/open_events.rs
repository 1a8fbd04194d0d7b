//! The events of a run once opened: one ring buffer per CPU, every other event of that CPU
//! (other metrics, allocator probes) redirected into it, and each event's kernel id.

use std::os::fd::{AsRawFd, OwnedFd};

use fxhash::FxHashMap;
use perf_event_open_sys::bindings as sys;

use crate::sampler::capture::event_plan::{Plan, RunError};
use crate::sampler::capture::events::{EventClass, EventSpec, Grouping};
use crate::sampler::capture::hold;
use crate::sampler::capture::perf::{self, AttrOptions};
use crate::sampler::capture::ring::Ring;
use crate::sampler::data::uprobes::Probe;
use crate::sampler::record::recorder::ProbeIds;

/// The open events: one ring per CPU, every other event of that CPU redirected into it.
pub(crate) struct OpenEvents {
    pub(crate) rings: Vec<Ring>,
    others: Vec<OwnedFd>,
    /// The event groups' members, with their metric: counted, never sampled.
    members: Vec<(usize, OwnedFd)>,
    /// The events that stop the command while the copier catches up ([`hold`]).
    tripwires: Vec<OwnedFd>,
    pub(crate) event_of_id: FxHashMap<u64, usize>,
    pub(crate) opts: AttrOptions,
    ring_of_cpu: FxHashMap<i32, usize>,
    /// Data pages per ring (halved while the locked-memory budget refuses them).
    pub(crate) pages: usize,
}

/// Data pages per ring unless `--buffer-kib` says otherwise, for `cpus` CPUs. As root, 64 MiB
/// over all the rings, each between 2 and 16 MiB: on a small machine one ring then holds a whole
/// burst of faults (1,200 samples with 8 KiB stack copies are 11 MB) even if the copier is kept
/// waiting (a loaded machine throttles real-time threads too), and a large one spends no more.
/// Otherwise 4 MiB, halved while the locked-memory limit refuses it, since an ordinary-priority
/// copier may wait for the CPU while a burst fills the ring.
pub(crate) fn default_ring_pages(cpus: usize) -> usize {
    if !nix::unistd::geteuid().is_root() {
        return 1024;
    }
    let pages = (64 << 20) / 4096 / cpus.max(1);
    let pages = 1 << pages.max(1).ilog2();
    pages.clamp(512, 4096)
}

impl OpenEvents {
    pub(crate) fn new(opts: AttrOptions, pages: usize) -> Self {
        OpenEvents {
            rings: Vec::new(),
            others: Vec::new(),
            members: Vec::new(),
            tripwires: Vec::new(),
            event_of_id: FxHashMap::default(),
            opts,
            ring_of_cpu: FxHashMap::default(),
            pages,
        }
    }

    /// Open every planned event for each of `tasks` on each of `cpus` (those of its PMU: a
    /// hybrid part's core types), each under its group leader if it has one: the first event of
    /// a CPU gets the ring, the others are redirected into it; the first of each task and CPU
    /// carries the side-band records (mappings, commands, forks).
    pub(crate) fn add_tasks(
        &mut self,
        plan: &Plan,
        tasks: &[i32],
        cpus: &[i32],
    ) -> Result<(), RunError> {
        for &cpu in cpus {
            for &task in tasks {
                let mut side_band = true;
                // The descriptor of the group leader last opened for this task and CPU.
                let mut group = -1;
                for (i, (spec, _)) in plan.specs.iter().enumerate() {
                    let sys_err =
                        |e: std::io::Error| RunError::System(perf::explain_open_error(spec, &e));
                    if spec.grouping == Grouping::Member {
                        let attr = perf::attr(spec, &self.opts, false);
                        let fd = perf::open_under(&attr, task, cpu, group).map_err(sys_err)?;
                        self.event_of_id
                            .insert(perf::event_id(&fd).map_err(sys_err)?, i);
                        self.members.push((i, fd));
                        continue;
                    }
                    for open in perf::event_attrs(spec, &self.opts, side_band) {
                        if !open.covers(cpu) {
                            continue;
                        }
                        side_band = false;
                        let leader = match &open.leader {
                            Some(l) => Some(perf::open(l, task, cpu).map_err(sys_err)?),
                            None => None,
                        };
                        let attr = open.attr;
                        if let Some(&r) = self.ring_of_cpu.get(&cpu) {
                            let fd = perf::open_in_group(&attr, task, cpu, leader.as_ref())
                                .map_err(sys_err)?;
                            self.event_of_id
                                .insert(perf::event_id(&fd).map_err(sys_err)?, i);
                            perf::redirect(&fd, self.rings[r].fd()).map_err(sys_err)?;
                            group = fd.as_raw_fd();
                            self.others.push(fd);
                            self.others.extend(leader);
                            continue;
                        }
                        let (ring, id) =
                            open_ring(attr, task, cpu, leader.as_ref(), &mut self.pages).map_err(
                                |e| match e {
                                    RingError::Open(e) => sys_err(e),
                                    RingError::Map(e) => RunError::System(format!(
                                    "cannot map the sample buffer ({e}); perf buffers may lock \
                                     kernel.perf_event_mlock_kb per CPU plus `ulimit -l`"
                                )),
                                },
                            )?;
                        self.event_of_id.insert(id, i);
                        group = ring.fd().as_raw_fd();
                        self.ring_of_cpu.insert(cpu, self.rings.len());
                        self.rings.push(ring);
                        self.others.extend(leader);
                    }
                }
            }
        }
        Ok(())
    }

    /// Open the allocator `probes` for each of `tasks` on each of `cpus` (after
    /// [`OpenEvents::add_tasks`], so every CPU has its ring) with the run's options, into the
    /// rings; returns their ids for the recorder.
    pub(crate) fn add_probes(
        &mut self,
        probes: &[Probe],
        tasks: &[i32],
        cpus: &[i32],
    ) -> std::io::Result<ProbeIds> {
        let mut ids = Vec::new();
        for &cpu in cpus {
            let Some(&r) = self.ring_of_cpu.get(&cpu) else {
                continue;
            };
            for &task in tasks {
                for probe in probes {
                    let mut attr = probe.attr;
                    attr.set_disabled(self.opts.enable_on_exec as u64);
                    attr.set_enable_on_exec(self.opts.enable_on_exec as u64);
                    let fd = perf::open(&attr, task, cpu)?;
                    let id = perf::event_id(&fd)?;
                    perf::redirect(&fd, self.rings[r].fd())?;
                    ids.push((id, probe.point, perf::parse_info(&attr)));
                    self.others.push(fd);
                }
            }
        }
        Ok(ids)
    }

    /// Open a tripwire for every planned event (not the precise memory events) on each of
    /// `tasks` and `cpus`, into the CPU's ring, that stops process `owner` every `every`
    /// samples until the copier has copied them ([`hold`]); returns their ids, whose samples the
    /// recorder skips, and the names of the events that have none.
    pub(crate) fn add_tripwires(
        &mut self,
        plan: &Plan,
        (tasks, cpus): (&[i32], &[i32]),
        owner: nix::unistd::Pid,
        every: u64,
    ) -> std::io::Result<(Vec<u64>, Vec<&'static str>)> {
        let mut ids = Vec::new();
        let specs: Vec<&EventSpec> = (plan.specs.iter().map(|(spec, _)| spec))
            .filter(|s| !matches!(s.event.class, EventClass::Memory(_)))
            .collect();
        let attrs: Vec<_> = (specs.iter())
            .map(|spec| perf::attr(spec, &self.opts, false))
            .collect();
        let sampled: Vec<(u32, u64)> = attrs.iter().map(|a| (a.type_, a.config)).collect();
        let (tripwires, without): (Vec<_>, Vec<_>) = (attrs.iter().zip(&specs))
            .map(|(a, spec)| (hold::tripwire(a, every, &sampled), spec.event.name))
            .partition(|(t, _)| t.is_some());
        let tripwires: Vec<_> = tripwires.into_iter().filter_map(|(t, _)| t).collect();
        let without = without.into_iter().map(|(_, name)| name).collect();
        for (&cpu, &task) in cpus.iter().flat_map(|c| tasks.iter().map(move |t| (c, t))) {
            let Some(&r) = self.ring_of_cpu.get(&cpu) else {
                continue;
            };
            for attr in &tripwires {
                let fd = perf::open(attr, task, cpu)?;
                ids.push(perf::event_id(&fd)?);
                perf::redirect(&fd, self.rings[r].fd())?;
                hold::arm(&fd, owner)?;
                self.tripwires.push(fd);
            }
        }
        Ok((ids, without))
    }

    /// Stop the tripwires from stopping anyone.
    pub(crate) fn release_hold(&self) {
        self.tripwires.iter().for_each(hold::disarm);
    }

    /// The sampling events redirected into the rings (the ring owners are the others).
    pub(crate) fn sampling_others(&self) -> impl Iterator<Item = &OwnedFd> {
        self.others.iter()
    }

    /// Every descriptor, ring owners first.
    pub(crate) fn fds(&self) -> impl Iterator<Item = &OwnedFd> {
        (self.rings.iter().map(Ring::fd))
            .chain(&self.others)
            .chain(self.members.iter().map(|(_, fd)| fd))
            .chain(&self.tripwires)
    }

    /// Per metric of `metrics`, what its group members counted over the whole run (their
    /// threads' and children's counts summed by the kernel as they ended); `None` for a metric
    /// without members, or one that could not be read.
    pub(crate) fn member_totals(&self, metrics: usize) -> Vec<Option<u64>> {
        let mut totals: Vec<Option<u64>> = vec![None; metrics];
        let mut unreadable = vec![false; metrics];
        for (metric, fd) in &self.members {
            match (perf::read_count(fd), totals.get_mut(*metric)) {
                (Some(count), Some(total)) => *total = Some(total.unwrap_or(0) + count),
                (None, Some(_)) => unreadable[*metric] = true,
                (_, None) => {}
            }
        }
        for (total, bad) in totals.iter_mut().zip(unreadable) {
            if bad {
                *total = None;
            }
        }
        totals
    }
}

enum RingError {
    Open(std::io::Error),
    Map(std::io::Error),
}

/// Open the event that owns a CPU's ring and map the ring, halving it while the locked-memory
/// budget refuses it. The wake-up watermark is a quarter of the ring: the copier
/// ([`crate::sampler::capture::ring::Copier`]) that wakes then only copies the records out, and the other three
/// quarters give it time to come on a busy machine.
fn open_ring(
    mut attr: sys::perf_event_attr,
    task: i32,
    cpu: i32,
    leader: Option<&OwnedFd>,
    pages: &mut usize,
) -> Result<(Ring, u64), RingError> {
    loop {
        perf::set_wakeup_watermark(&mut attr, (*pages * 4096 / 4) as u32);
        let fd = perf::open_in_group(&attr, task, cpu, leader).map_err(RingError::Open)?;
        let id = perf::event_id(&fd).map_err(RingError::Open)?;
        match Ring::map(fd, *pages) {
            Ok(ring) => return Ok((ring, id)),
            Err(e) if e.raw_os_error() == Some(libc::EPERM) && *pages > 8 => *pages /= 2,
            Err(e) => return Err(RingError::Map(e)),
        }
    }
}
