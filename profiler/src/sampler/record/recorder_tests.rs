//! The recorder fed synthetic kernel records, without perf_event_open: mappings, command
//! changes, forks and samples with hand-built stacks, laid out exactly as the kernel lays them
//! out for the attribute hpcrun-rs opens.
//!
//! The synthetic module path does not exist, so the unwinder has no CFI for it and walks the
//! frame-pointer chain the stacks below are built with: `[bp]` is the caller's frame pointer,
//! `[bp + 8]` the return address, and a zero frame pointer ends the stack.

use super::*;
use crate::format::db::{Cct, ProfileModuleId, Sampling};
use crate::sampler::capture::events::EventSpec;
use crate::sampler::capture::perf::{attr, parse_info, AttrOptions};
use crate::sampler::record::recorder::PreciseLayout;
use linux_perf_event_reader::RawData;

/// A process id no real process has (above the kernel's `pid_max` limit).
const PID: u32 = 0x7fff_0000;
/// The id the samples' event has.
const EVENT_ID: u64 = 7;
/// Where the synthetic module is mapped, and its file offset.
const BASE: u64 = 0x40_0000;
const PGOFF: u64 = 0x1000;
/// Top of the synthetic stacks.
const STACK_TOP: u64 = 0x7ff0_0000;

const PERF_RECORD_MMAP2: u32 = 10;
const PERF_RECORD_COMM: u32 = 3;
const PERF_RECORD_FORK: u32 = 7;
const PERF_RECORD_SAMPLE: u32 = 9;
const MISC_USER: u16 = 2;
const MISC_COMM_EXEC: u16 = 1 << 13;

fn recorder() -> Recorder {
    let spec = EventSpec::parse("cpu-clock@f1000").unwrap();
    let opts = AttrOptions {
        stack_size: 4096,
        kernel: false,
        enable_on_exec: true,
        data: false,
        precise: Default::default(),
    };
    let layout = EventLayout {
        parse_info: parse_info(&attr(&spec, &opts, true)),
        fixed_period: None,
        data: crate::sampler::capture::events::DataSource::None,
        precise: None,
        off_cpu: false,
        group_read: None,
    };
    Recorder::new(vec![layout], [(EVENT_ID, 0)].into_iter().collect())
}

fn feed(rec: &mut Recorder, record_type: u32, misc: u16, body: &[u8]) {
    rec.handle(&RingRecord {
        record_type,
        misc,
        data: RawData::Single(body),
    });
}

fn push(out: &mut Vec<u8>, values: &[u64]) {
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn pid_tid(pid: u32, tid: u32) -> u64 {
    pid as u64 | (tid as u64) << 32
}

/// The `sample_id_all` trailer of side-band records: TID, TIME, CPU, IDENTIFIER.
fn trailer(out: &mut Vec<u8>, pid: u32, tid: u32) {
    push(out, &[pid_tid(pid, tid), 0, 0, EVENT_ID]);
}

/// A NUL-terminated string padded to 8 bytes.
fn string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.resize((out.len() + 8) & !7, 0);
}

fn mmap2(rec: &mut Recorder, pid: u32, start: u64, len: u64, pgoff: u64, path: &str) {
    let mut b = Vec::new();
    push(&mut b, &[pid_tid(pid, pid), start, len, pgoff, 0, 0, 0]);
    push(&mut b, &[(libc::PROT_READ | libc::PROT_EXEC) as u64]); // prot, flags
    string(&mut b, path);
    trailer(&mut b, pid, pid);
    feed(rec, PERF_RECORD_MMAP2, 0, &b);
}

fn comm(rec: &mut Recorder, pid: u32, name: &str, exec: bool) {
    let mut b = Vec::new();
    push(&mut b, &[pid_tid(pid, pid)]);
    string(&mut b, name);
    trailer(&mut b, pid, pid);
    feed(
        rec,
        PERF_RECORD_COMM,
        if exec { MISC_COMM_EXEC } else { 0 },
        &b,
    );
}

fn fork(rec: &mut Recorder, pid: u32, ppid: u32) {
    let mut b = Vec::new();
    push(&mut b, &[pid_tid(pid, ppid), pid_tid(pid, ppid), 0]);
    trailer(&mut b, pid, pid);
    feed(rec, PERF_RECORD_FORK, 0, &b);
}

/// A stack whose frame-pointer chain holds `return_addresses` (innermost first) and ends with a
/// zero frame pointer: (sp, bp, bytes). Each frame is 32 bytes: two locals, then the saved
/// frame pointer and the return address.
fn stack(return_addresses: &[u64]) -> (u64, u64, Vec<u8>) {
    let size = 32 * return_addresses.len() as u64;
    let sp = STACK_TOP - size;
    let mut bytes = Vec::new();
    for (i, ra) in return_addresses.iter().enumerate() {
        let frame = sp + 32 * i as u64;
        let caller_bp = if i + 1 < return_addresses.len() {
            frame + 32 + 16
        } else {
            0
        };
        push(&mut bytes, &[0xdead, 0xbeef, caller_bp, *ra]);
    }
    (sp, sp + 16, bytes)
}

/// A user-mode sample of thread `tid` of process `pid` at `ip`, whose copy holds the first
/// `copied` bytes of `stack`.
fn sample(
    rec: &mut Recorder,
    pid: u32,
    tid: u32,
    ip: u64,
    stack: &(u64, u64, Vec<u8>),
    copied: usize,
) {
    let (sp, bp, bytes) = stack;
    let copy = &bytes[..copied.min(bytes.len())];
    let mut b = Vec::new();
    push(&mut b, &[EVENT_ID, ip, pid_tid(pid, tid), 1, 0, 1_000_000]);
    push(&mut b, &[2, *bp, *sp, ip]); // regs ABI 64, then BP, SP, IP (bit order)
    push(&mut b, &[4096]);
    b.extend_from_slice(copy);
    b.resize(b.len() + 4096 - copy.len(), 0);
    push(&mut b, &[copy.len() as u64]);
    feed(rec, PERF_RECORD_SAMPLE, MISC_USER, &b);
}

/// Every sampled path of `cct` as (frames root first, samples).
fn paths(cct: &Cct) -> Vec<(Vec<Frame>, u64)> {
    let mut out = Vec::new();
    for (i, node) in cct.nodes.iter().enumerate().skip(1) {
        if node.costs[0].samples == 0 {
            continue;
        }
        let mut frames = Vec::new();
        let mut n = i;
        while n != 0 {
            frames.push(cct.nodes[n].frame);
            n = cct.nodes[n].parent.index();
        }
        frames.reverse();
        out.push((frames, node.costs[0].samples));
    }
    out.sort_by_key(|(f, _)| format!("{f:?}"));
    out
}

/// The frame of runtime address `avma` in the synthetic module.
fn code(avma: u64, kind: AddrKind) -> Frame {
    Frame::Code {
        module: ProfileModuleId(0),
        addr: crate::format::addr::Svma(avma - BASE + PGOFF),
        kind,
    }
}

fn mapped(rec: &mut Recorder) {
    comm(rec, PID, "app", true);
    mmap2(rec, PID, BASE, 0x10000, PGOFF, "/nonexistent/app");
}

#[test]
fn a_complete_path_is_resolved_to_link_time_addresses() {
    let mut rec = recorder();
    mapped(&mut rec);
    let st = stack(&[BASE + 0x200, BASE + 0x300]);
    sample(&mut rec, PID, PID, BASE + 0x100, &st, 4096);
    let r = rec.finish();
    assert_eq!(r.stats.samples, 1);
    assert_eq!(r.stats.partial, 0);
    assert_eq!(r.threads.len(), 1);
    let want = vec![
        code(BASE + 0x300, AddrKind::Return),
        code(BASE + 0x200, AddrKind::Return),
        code(BASE + 0x100, AddrKind::Ip),
    ];
    assert_eq!(paths(&r.threads[0].cct), vec![(want, 1)]);
}

#[test]
fn a_truncated_path_is_completed_from_the_previous_one_only_at_the_same_frame() {
    let mut rec = recorder();
    mapped(&mut rec);
    let ras = [BASE + 0x210, BASE + 0x220, BASE + 0x230, BASE + 0x240];
    let deep = stack(&ras);
    sample(&mut rec, PID, PID, BASE + 0x100, &deep, 4096);
    // The same outer frames, a copy that ends after two of them: completed.
    sample(&mut rec, PID, PID, BASE + 0x110, &deep, 64);
    // Another stack (other return addresses at the same places): left partial.
    let other = stack(&[BASE + 0x510, BASE + 0x520, BASE + 0x530, BASE + 0x540]);
    sample(&mut rec, PID, PID, BASE + 0x120, &other, 64);
    let r = rec.finish();
    assert_eq!((r.stats.stitched, r.stats.partial), (1, 1));
    let outer: Vec<Frame> = ras
        .iter()
        .rev()
        .map(|&a| code(a, AddrKind::Return))
        .collect();
    let full = |ip| [outer.clone(), vec![code(ip, AddrKind::Ip)]].concat();
    let partial = vec![
        Frame::Partial,
        code(BASE + 0x520, AddrKind::Return),
        code(BASE + 0x510, AddrKind::Return),
        code(BASE + 0x120, AddrKind::Ip),
    ];
    let got = paths(&r.threads[0].cct);
    assert!(got.contains(&(full(BASE + 0x100), 1)), "{got:?}");
    assert!(got.contains(&(full(BASE + 0x110), 1)), "{got:?}");
    assert!(got.contains(&(partial, 1)), "{got:?}");
    assert_eq!(got.len(), 3);
}

#[test]
fn exec_forgets_the_old_image_and_fork_inherits_the_parents() {
    let mut rec = recorder();
    mapped(&mut rec);
    let child = PID + 1;
    fork(&mut rec, child, PID);
    comm(&mut rec, PID, "new", true);
    let st = stack(&[BASE + 0x200]);
    sample(&mut rec, PID, PID, BASE + 0x100, &st, 4096);
    sample(&mut rec, child, child, BASE + 0x100, &st, 4096);
    let r = rec.finish();
    let by_pid = |pid| r.threads.iter().find(|t| t.pid == pid).unwrap();
    let after_exec = paths(&by_pid(PID).cct);
    let unmapped = |avma, kind| Frame::Unmapped {
        avma: Avma(avma),
        kind,
    };
    // The old image's addresses are no code of the new one: the sampled address is kept, a
    // return address there is no caller, and the path is partial.
    assert_eq!(
        after_exec[0].0,
        vec![Frame::Partial, unmapped(BASE + 0x100, AddrKind::Ip)]
    );
    let forked = paths(&by_pid(child).cct);
    assert_eq!(
        forked[0].0,
        vec![
            code(BASE + 0x200, AddrKind::Return),
            code(BASE + 0x100, AddrKind::Ip)
        ]
    );
    assert_eq!(
        r.processes.iter().find(|p| p.pid == child).unwrap().ppid,
        PID
    );
}

/// A child's first sample read before its fork record (the rings of two CPUs copied out of
/// order): the fork record still gives it its parent and the parent's mappings, so its later
/// samples resolve in the code the parent mapped.
#[test]
fn a_child_sampled_before_its_fork_record_still_gets_its_parent() {
    let mut rec = recorder();
    mapped(&mut rec);
    let child = PID + 1;
    let st = stack(&[BASE + 0x200]);
    sample(&mut rec, child, child, BASE + 0x100, &st, 4096);
    fork(&mut rec, child, PID);
    sample(&mut rec, child, child, BASE + 0x100, &st, 4096);
    let r = rec.finish();
    assert_eq!(
        r.processes.iter().find(|p| p.pid == child).unwrap().ppid,
        PID
    );
    let got = paths(&r.threads.iter().find(|t| t.pid == child).unwrap().cct);
    let resolved = vec![
        code(BASE + 0x200, AddrKind::Return),
        code(BASE + 0x100, AddrKind::Ip),
    ];
    assert!(
        got.iter().any(|(p, n)| *p == resolved && *n == 1),
        "{got:?}"
    );
}

#[test]
fn a_recording_survives_a_profile_db_round_trip() {
    let mut rec = recorder();
    mapped(&mut rec);
    let st = stack(&[BASE + 0x200, BASE + 0x300]);
    for ip in [BASE + 0x100, BASE + 0x104, BASE + 0x100] {
        sample(&mut rec, PID, PID, ip, &st, 4096);
    }
    let r = rec.finish();
    let profile = crate::format::db::Profile {
        host: "h".into(),
        start_ns: 1,
        end_ns: 2,
        modules: r.modules.into_infos(),
        processes: r.processes,
        threads: r.threads,
        stats: r.stats,
        data: r.data,
        traces: r.traces,
        ..crate::format::db::Profile::new(
            vec!["app".into()],
            vec![crate::format::db::EventDesc::new(
                "cpu-clock",
                Sampling::Frequency(1000),
                "ns",
            )],
        )
    };
    let bytes = profile.to_bytes().unwrap();
    let back =
        crate::format::db::Profile::from_bytes(&bytes, std::path::Path::new("p.db")).unwrap();
    assert_eq!(back, profile);
    assert_eq!(back.modules[0].path, "/nonexistent/app");
    let total = back.threads[0].cct.total(0);
    assert_eq!((total.samples, total.value), (3, 3_000_000));
}

/// A recorder of one precise memory event (`mem-loads` at 1000 Hz on a fake Intel machine)
/// whose samples count when they are of operations `keep`.
fn precise_recorder(keep: crate::sampler::capture::pmu::MemOp) -> Recorder {
    let dir = tempfile::tempdir().unwrap();
    crate::sampler::capture::pmu::tests::intel(dir.path());
    let units = crate::sampler::capture::pmu::PreciseUnits::detect(dir.path()).unwrap();
    let spec = EventSpec::parse_with("mem-loads@f1000", Some(&units)).unwrap()[0];
    let opts = AttrOptions {
        stack_size: 4096,
        kernel: false,
        enable_on_exec: true,
        data: true,
        precise: Default::default(),
    };
    let attr = crate::sampler::capture::perf::memory_attrs(&units, &spec, &opts, true)[0].attr;
    let layout = EventLayout {
        parse_info: parse_info(&attr),
        fixed_period: None,
        data: crate::sampler::capture::events::DataSource::Precise,
        precise: Some(PreciseLayout {
            fields: crate::sampler::data::sample::SampleLayout::of(&attr),
            keep,
        }),
        off_cpu: false,
        group_read: None,
    };
    Recorder::new(vec![layout], [(EVENT_ID, 0)].into_iter().collect())
}

/// A precise memory sample at `ip` touching `addr`, with weight `latency` and `data_src`.
fn precise_sample(rec: &mut Recorder, ip: u64, addr: u64, latency: u64, data_src: u64) {
    let (sp, bp, bytes) = stack(&[BASE + 0x200]);
    let mut b = Vec::new();
    // IDENTIFIER IP TID TIME ADDR CPU PERIOD
    push(&mut b, &[EVENT_ID, ip, pid_tid(PID, PID), 1, addr, 0, 100]);
    push(&mut b, &[2, bp, sp, ip]);
    push(&mut b, &[4096]);
    b.extend_from_slice(&bytes);
    b.resize(b.len() + 4096 - bytes.len(), 0);
    push(&mut b, &[bytes.len() as u64]);
    // WEIGHT_STRUCT (instruction latency 9 in var2_w, not kept), DATA_SRC
    push(&mut b, &[latency | 9 << 32, data_src]);
    feed(rec, PERF_RECORD_SAMPLE, MISC_USER, &b);
}

/// perf_mem_data_src: a load that hit L1, and a load from remote DRAM (level number RAM +
/// remote), a store that hit L1.
const LOAD_L1: u64 = 0x02 | (0x02 | 0x08) << 5 | 0x01 << 33;
const LOAD_REMOTE_RAM: u64 = 0x02 | 0x02 << 5 | 0x0d << 33 | 1 << 37;
const STORE_L1: u64 = 0x04 | (0x02 | 0x08) << 5;

#[test]
fn precise_memory_samples_keep_their_address_data_source_and_latency() {
    use crate::format::dataref::{DataRef, MemLevel};
    let mut rec = precise_recorder(crate::sampler::capture::pmu::MemOp::Both);
    mapped(&mut rec);
    precise_sample(&mut rec, BASE + 0x100, 0x5000_0000, 5, LOAD_L1);
    precise_sample(&mut rec, BASE + 0x100, 0x5000_0040, 300, LOAD_REMOTE_RAM);
    precise_sample(&mut rec, BASE + 0x100, 0, 7, LOAD_L1); // no address: no data reference
    let r = rec.finish();
    assert_eq!(r.stats.samples, 3);
    assert_eq!(r.data.stats.by_class, [0, 0, 0, 0, 2]);
    let costs = &r.data.threads[0].costs;
    assert_eq!(costs.len(), 1);
    assert_eq!(costs[0].data, DataRef::Unknown);
    assert_eq!(
        (costs[0].costs[0].samples, costs[0].costs[0].value),
        (2, 200)
    );
    let h = &costs[0].sources[0];
    assert_eq!(h.levels[MemLevel::L1.index()], 1);
    assert_eq!(h.levels[MemLevel::Remote.index()], 1);
    assert_eq!((h.samples(), h.latency, h.weighted), (2, 305, 2));
}

#[test]
fn samples_of_operations_not_asked_for_are_dropped() {
    let mut rec = precise_recorder(crate::sampler::capture::pmu::MemOp::Loads);
    mapped(&mut rec);
    precise_sample(&mut rec, BASE + 0x100, 0x5000_0000, 5, LOAD_L1);
    precise_sample(&mut rec, BASE + 0x100, 0x5000_0000, 5, STORE_L1);
    let r = rec.finish();
    assert_eq!(r.stats.samples, 1);
    assert_eq!(r.data.source_total(0).samples(), 1);
}
