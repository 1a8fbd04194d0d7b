//! Unit tests of the event attributes and the messages of `perf`.

use super::*;
use crate::sampler::capture::pmu::tests::{amd, arm, hybrid, intel};

/// IDENTIFIER | IP | TID | TIME | CPU | REGS_USER | STACK_USER, as numbers (perf_event.h).
const BASE: u64 = 0x1_0000 | 0x1 | 0x2 | 0x4 | 0x80 | 0x1000 | 0x2000;
const PERIOD: u64 = 0x100;
const ADDR: u64 = 0x8;
const DATA_SRC: u64 = 0x8000;
const WEIGHT: u64 = 0x4000;
const WEIGHT_STRUCT: u64 = 0x100_0000;

fn opts(precise: PreciseTuning) -> AttrOptions {
    AttrOptions {
        stack_size: 8192,
        kernel: false,
        enable_on_exec: true,
        data: true,
        precise,
    }
}

/// The opens of `event` on the fake machine `build` makes.
fn opens(build: fn(&std::path::Path), event: &str, precise: PreciseTuning) -> Vec<OpenAttr> {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let units = PreciseUnits::detect(dir.path()).unwrap();
    let spec = EventSpec::parse_with(event, Some(&units)).unwrap();
    assert_eq!(spec.len(), 1, "{event}");
    memory_attrs(&units, &spec[0], &opts(precise), true)
}

/// (type, config, config1, config2, precise_ip, sample_type) of an attribute.
fn fields(a: &sys::perf_event_attr) -> (u32, u64, u64, u64, u64, u64) {
    // SAFETY: plain integers in the unions.
    let (c1, c2) = unsafe { (a.__bindgen_anon_3.config1, a.__bindgen_anon_4.config2) };
    (a.type_, a.config, c1, c2, a.precise_ip(), a.sample_type)
}

#[test]
fn intel_loads_and_stores_are_opened_as_perf_mem_opens_them() {
    let loads = opens(intel, "mem-loads@f1000", PreciseTuning::default());
    assert_eq!(loads.len(), 1);
    let a = &loads[0].attr;
    let sampled = BASE | PERIOD | ADDR | DATA_SRC | WEIGHT_STRUCT;
    assert_eq!(fields(a), (4, 0x1cd, 30, 0, 3, sampled));
    assert_eq!(sampled, 0x101_b18f);
    // SAFETY: the frequency member of the union, as `freq` says.
    assert_eq!(
        (a.freq(), unsafe { a.__bindgen_anon_1.sample_freq }),
        (1, 1000)
    );
    assert_eq!((a.exclude_kernel(), a.exclude_hv(), a.inherit()), (1, 1, 1));
    assert_eq!((a.disabled(), a.enable_on_exec(), a.mmap2()), (1, 1, 1));
    assert_eq!(a.sample_regs_user, SAMPLE_REGS_USER, "no EA registers");
    assert!(loads[0].leader.is_none() && loads[0].cpus.is_none());

    let stores = opens(intel, "mem-stores@5000", PreciseTuning::default());
    let a = &stores[0].attr;
    assert_eq!(
        fields(a),
        (4, 0x82d0, 0, 0, 3, BASE | ADDR | DATA_SRC | WEIGHT_STRUCT)
    );
    // SAFETY: a fixed period.
    assert_eq!(
        (a.freq(), unsafe { a.__bindgen_anon_1.sample_period }),
        (0, 5000)
    );

    // What an older kernel accepts: a plain weight, then lower precision.
    let lowered = PreciseTuning::default()
        .lowered()
        .unwrap()
        .lowered()
        .unwrap();
    assert_eq!(
        lowered,
        PreciseTuning {
            weight_struct: false,
            max_precise_ip: 2
        }
    );
    let old = opens(intel, "mem-loads@f1000", lowered);
    assert_eq!(
        fields(&old[0].attr),
        (4, 0x1cd, 30, 0, 2, BASE | PERIOD | ADDR | DATA_SRC | WEIGHT)
    );
    let last = PreciseTuning {
        weight_struct: false,
        max_precise_ip: 1,
    };
    assert_eq!(last.lowered(), None);
}

#[test]
fn hybrid_intel_opens_each_core_type_on_its_cpus_with_the_aux_leader_on_the_big_cores() {
    let loads = opens(hybrid, "mem-loads@f1000", PreciseTuning::default());
    assert_eq!(loads.len(), 2);
    let sampled = BASE | PERIOD | ADDR | DATA_SRC | WEIGHT_STRUCT;
    let (atom, core) = (&loads[0], &loads[1]);
    assert_eq!(fields(&atom.attr), (10, 0x5d0, 30, 0, 3, sampled));
    assert_eq!(atom.cpus, Some((16..=23).collect()));
    assert!(atom.leader.is_none());
    assert!(atom.covers(16) && !atom.covers(3));
    assert_eq!((atom.attr.disabled(), atom.attr.enable_on_exec()), (1, 1));

    assert_eq!(fields(&core.attr), (4, 0x1cd, 30, 0, 3, sampled));
    assert_eq!(core.cpus, Some((0..=15).collect()));
    // The member follows its leader, which counts (no samples) and is enabled at exec.
    assert_eq!((core.attr.disabled(), core.attr.enable_on_exec()), (0, 0));
    let leader = core.leader.as_ref().unwrap();
    assert_eq!(fields(leader), (4, 0x8203, 0, 0, 0, 0));
    // SAFETY: a counting event: period 0.
    assert_eq!(unsafe { leader.__bindgen_anon_1.sample_period }, 0);
    assert_eq!((leader.disabled(), leader.enable_on_exec()), (1, 1));
    assert_eq!((leader.inherit(), leader.exclude_kernel()), (1, 1));
}

#[test]
fn amd_ibs_is_opened_as_ibs_op_without_precise_ip_or_hypervisor_exclusion() {
    let mem = opens(amd, "mem@4096", PreciseTuning::default());
    assert_eq!(mem.len(), 1);
    let a = &mem[0].attr;
    assert_eq!(
        fields(a),
        (11, 0, 0, 0, 0, BASE | ADDR | DATA_SRC | WEIGHT_STRUCT)
    );
    assert_eq!((a.exclude_hv(), a.exclude_kernel()), (0, 1));
    // SAFETY: a fixed period.
    assert_eq!(unsafe { a.__bindgen_anon_1.sample_period }, 4096);
}

#[test]
fn arm_spe_attributes_carry_its_filters() {
    let dir = tempfile::tempdir().unwrap();
    arm(dir.path());
    let units = PreciseUnits::detect(dir.path()).unwrap();
    // `-e` refuses SPE (its records are not samples); its attributes are built all the same.
    let spec = EventSpec {
        event: crate::sampler::capture::events::find("mem-loads").unwrap(),
        sampling: Sampling::Frequency(1000),
        grouping: Default::default(),
    };
    let loads = memory_attrs(&units, &spec, &opts(PreciseTuning::default()), false);
    let sampled = BASE | PERIOD | ADDR | DATA_SRC | WEIGHT_STRUCT;
    assert_eq!(fields(&loads[0].attr), (9, 1 | 1 << 33, 0, 30, 0, sampled));
    assert_eq!(loads[0].cpus, Some((0..=7).collect()));
    assert_eq!(loads[0].attr.mmap2(), 0, "no side band asked for");
}

#[test]
fn other_events_open_once_everywhere() {
    let spec = EventSpec::parse("page-faults@1").unwrap();
    let opens = event_attrs(&spec, &opts(PreciseTuning::default()), false);
    assert_eq!(opens.len(), 1);
    assert!(opens[0].leader.is_none() && opens[0].covers(123));
    assert_eq!(opens[0].attr.sample_type, BASE | ADDR);
    assert_eq!(opens[0].attr.precise_ip(), 0);
}
