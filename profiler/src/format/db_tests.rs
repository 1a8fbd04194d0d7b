//! Tests of the `profile.db` format: round trips, older versions, refused damage.

use super::*;
use crate::format::builder::{code, ProfileBuilder};
use crate::format::dataref::SourceHist;
use crate::format::job::JobPlace;
use crate::format::trace::ThreadTrace;

fn small_profile() -> Profile {
    let event = EventDesc::new("cpu-clock", Sampling::Period(1000), "ns");
    let mut profile = ProfileBuilder::new("./app", event)
        .times(1, 2)
        .module("/app")
        .thread(1, 1, "app")
        .path(&[code(0, 0x1234, AddrKind::Ip)], 3, 1000)
        .build();
    profile.modules[0].checksum = Some(0xdead_beef);
    profile
}

#[test]
fn module_checksums_round_trip_and_version_1_files_still_read() {
    let p = Path::new("p.db");
    let profile = small_profile();
    let back = Profile::from_bytes(&profile.to_bytes().unwrap(), p).unwrap();
    assert_eq!(back, profile);
    let mut v1 = b"HPCRUNRS\x01\0\0\0".to_vec();
    v1.extend(postcard::to_stdvec(&profile).unwrap());
    let old = Profile::from_bytes(&v1, p).unwrap();
    assert_eq!(old.modules[0].checksum, None);
    assert_eq!(old.threads, profile.threads);
}

/// `small_profile` with one data cost (2 samples in `<unknown>` at node 1), with data-source
/// histograms when `sources`.
pub(crate) fn profile_with_data(sources: bool) -> Profile {
    use crate::format::dataref::{DataCost, DataRef, DataStats, MemLevel, SourceHist, ThreadData};
    let mut hist = SourceHist::default();
    hist.add(MemLevel::L1, 5);
    hist.add(MemLevel::Hitm, 180);
    let mut profile = small_profile();
    profile.data = DataProfile {
        threads: vec![ThreadData {
            costs: vec![DataCost {
                node: CctNodeId(1),
                data: DataRef::Unknown,
                costs: vec![Cost {
                    samples: 2,
                    value: 2_000,
                }],
                sources: if sources { vec![hist] } else { vec![] },
            }],
            allocs: vec![],
        }],
        stats: DataStats {
            by_class: [0, 0, 0, 0, 2],
            ..Default::default()
        },
        traces: Default::default(),
    };
    profile
}

#[test]
fn version_3_files_still_read_and_version_4_keeps_the_data_sources() {
    let p = Path::new("p.db");
    // A version-3 file: the profile, the checksums, the data references, nothing after.
    let old = profile_with_data(false);
    let v3 = old.to_version(3);
    assert_eq!(&v3[8..12], &3u32.to_le_bytes());
    assert_eq!(Profile::from_bytes(&v3, p).unwrap(), old);

    // Version 4 and later round trip the histograms.
    let new = profile_with_data(true);
    let bytes = new.to_bytes().unwrap();
    assert_eq!(&bytes[8..12], &PROFILE_FILE.version.to_le_bytes());
    let back = Profile::from_bytes(&bytes, p).unwrap();
    assert_eq!(back, new);
    let h = &back.data.threads[0].costs[0].sources[0];
    assert_eq!(
        (h.levels[0], h.levels[6], h.latency, h.weighted),
        (1, 1, 185, 2)
    );
    assert_eq!(back.data.source_total(0).samples(), 2);
    // Without histograms, version 4 reads back the same as version 3 wrote.
    assert_eq!(
        Profile::from_bytes(&old.to_bytes().unwrap(), p).unwrap(),
        old
    );

    // Histograms that do not fit the profile are refused.
    let mut bad = new.clone();
    bad.data.threads[0].costs[0]
        .sources
        .push(SourceHist::default());
    let err = Profile::from_bytes(&bad.to_bytes().unwrap(), p).unwrap_err();
    assert!(
        err.to_string()
            .contains("2 data-source histograms for 1 events"),
        "{err}"
    );
}

#[test]
fn watch_results_round_trip_and_version_6_files_read_without() {
    use crate::format::watchdb::{Binding, WatchAccess, WatchMode, WatchProfile, WatchedVar};
    let p = Path::new("p.db");
    let mut new = small_profile();
    new.watch = WatchProfile {
        mode: WatchMode::Variables(vec![WatchedVar {
            name: "buf".into(),
            address: 0x4040,
            size: 4096,
            watched: 8,
        }]),
        functions: vec!["produce".into(), "consume1".into()],
        accesses: vec![WatchAccess {
            var: 0,
            function: 1,
            reads: 2000,
            writes: 0,
        }],
        bindings: vec![Binding {
            producer: 0,
            consumer: 1,
            stack: false,
            bytes: 16000.0,
            bytes_error: 0.0,
            addresses: 8.0,
            seen_bytes: 16000,
            seen_reads: 2000,
        }],
        traps: 3000,
        lost: 0,
    };
    let back = Profile::from_bytes(&new.to_bytes().unwrap(), p).unwrap();
    assert_eq!(back, new);
    // A version-6 file: every part but the watch results.
    let old = small_profile();
    assert_eq!(Profile::from_bytes(&old.to_version(6), p).unwrap(), old);
    // Out-of-range function indexes are refused.
    let mut bad = new.clone();
    bad.watch.bindings[0].consumer = 9;
    let err = Profile::from_bytes(&bad.to_bytes().unwrap(), p).unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
}

#[test]
fn no_damaged_byte_of_a_profile_is_accepted() {
    let p = Path::new("p.db");
    let bytes = small_profile().to_bytes().unwrap();
    for i in 0..bytes.len() {
        for flip in [0x01, 0x10, 0xff] {
            let mut bad = bytes.clone();
            bad[i] ^= flip;
            let read = Profile::from_bytes(&bad, p);
            assert!(read.is_err(), "byte {i} ^ {flip:#x} accepted");
        }
    }
}

#[test]
fn costs_saturate_instead_of_wrapping() {
    let big = Cost {
        samples: u64::MAX - 1,
        value: u64::MAX - 10,
    };
    let small = Cost {
        samples: 5,
        value: 20,
    };
    let max = Cost {
        samples: u64::MAX,
        value: u64::MAX,
    };
    assert_eq!(big + small, max);
    assert_eq!([big, small, small].into_iter().sum::<Cost>(), max);
    let mut sums = [small];
    Cost::add_each(&mut sums, &[big]);
    assert_eq!(sums, [max]);
}

#[test]
fn version_4_files_read_outside_a_job_and_version_5_keeps_the_rank() {
    let p = Path::new("p.db");
    let old = profile_with_data(false);
    let sums: Vec<Option<u32>> = old.modules.iter().map(|m| m.checksum).collect();
    let parts = [
        postcard::to_stdvec(&old).unwrap(),
        postcard::to_stdvec(&sums).unwrap(),
        postcard::to_stdvec(&old.data).unwrap(),
        postcard::to_stdvec(&old.data.memory_sources()).unwrap(),
    ];
    let v4 = FileKind {
        version: 4,
        ..PROFILE_FILE
    }
    .encode_parts(&[&parts[0], &parts[1], &parts[2], &parts[3]])
    .unwrap();
    assert_eq!(
        Profile::from_bytes(&v4, p).unwrap().job,
        JobPlace::default()
    );
    let mut ranked = old;
    ranked.job = JobPlace {
        rank: Some(3),
        job: Some("4711".into()),
    };
    let back = Profile::from_bytes(&ranked.to_bytes().unwrap(), p).unwrap();
    assert_eq!(back.job, ranked.job);
}

#[test]
fn profiles_keep_their_traces_and_version_5_files_still_read() {
    let p = Path::new("p.db");
    let mut profile = profile_with_data(true);
    let mut trace = ThreadTrace::new(profile.threads[0].tid);
    trace.push(5_000, 1);
    trace.push(6_000, 1);
    profile.traces.threads.push(trace);
    let back = Profile::from_bytes(&profile.to_bytes().unwrap(), p).unwrap();
    assert_eq!(
        back.traces.threads[0].decode(2).unwrap(),
        [(5_000, 1), (6_000, 1)]
    );

    // Version 5: the same parts less the traces.
    let old = profile_with_data(true);
    assert_eq!(Profile::from_bytes(&old.to_version(5), p).unwrap(), old);

    // A trace naming a node its tree does not have is refused.
    profile.traces.threads[0].push(7_000, 9);
    let err = Profile::from_bytes(&profile.to_bytes().unwrap(), p).unwrap_err();
    assert!(err.to_string().contains("context 9 of 2"), "{err}");
}

/// A `profile.db` of format version 8 (the last untagged one), written by the hpcrun-rs of
/// commit 7483711: `hpcrun-rs -e page-faults@50 --data -t` on the fault-burst fixture.
const VERSION_8: &[u8] = include_bytes!("../../tests/data/profile-v8.db");

#[test]
fn a_version_8_file_of_the_previous_hpcrun_rs_still_reads() {
    let p = Path::new("v8.db");
    assert_eq!(&VERSION_8[8..12], &8u32.to_le_bytes());
    let old = Profile::from_bytes(VERSION_8, p).unwrap();
    assert_eq!(old.events[0].name, "page-faults");
    assert!(!old.data.threads.is_empty() && !old.traces.threads.is_empty());
    assert!(!old.data.traces.threads.is_empty());
    // The untagged parts this build writes for old versions are that writer's bytes.
    assert_eq!(old.to_version(8), VERSION_8);
    // Written again it is tagged, and reads back the same.
    let now = old.to_bytes().unwrap();
    assert_eq!(&now[8..12], &PROFILE_FILE.version.to_le_bytes());
    assert_eq!(Profile::from_bytes(&now, p).unwrap(), old);
    // Every older version is a prefix of its parts and reads without what came later.
    for version in 1..8 {
        let back = Profile::from_bytes(&old.to_version(version), p).unwrap();
        assert_eq!(back.threads, old.threads, "version {version}");
        assert_eq!(back.data.traces.threads.is_empty(), version < 8);
        assert_eq!(back.traces.threads.is_empty(), version < 6);
        assert_eq!(back.data.threads.is_empty(), version < 3);
    }
}

#[test]
fn unknown_sections_are_skipped_and_missing_ones_named() {
    let p = Path::new("p.db");
    let profile = profile_with_data(true);
    let parts = profile.parts().unwrap();
    let tagged = |ids: &[u32], extra: &[(u32, &[u8])]| {
        let mut list: Vec<(u32, &[u8])> = (ids.iter())
            .map(|&id| (id, parts[id as usize - 1].as_slice()))
            .collect();
        list.extend_from_slice(extra);
        PROFILE_FILE
            .encode_parts(&[&sections::join(&list)])
            .unwrap()
    };
    let all: Vec<u32> = (1..=LAST_SECTION).collect();
    let newer = tagged(&all, &[(42, b"from a newer hpcrun-rs")]);
    assert_eq!(Profile::from_bytes(&newer, p).unwrap(), profile);
    // Sections in another order read the same.
    let reversed: Vec<u32> = all.iter().rev().copied().collect();
    assert_eq!(
        Profile::from_bytes(&tagged(&reversed, &[]), p).unwrap(),
        profile
    );
    // The optional ones may be absent; the profile and its checksums may not.
    let bare = Profile::from_bytes(&tagged(&[1, 2], &[]), p).unwrap();
    assert_eq!(
        (bare.threads, bare.data.threads.len()),
        (profile.threads, 0)
    );
    for (ids, named) in [
        (&[2, 3][..], "section 1 (the profile) is missing"),
        (&[1, 3], "section 2 (the modules' checksums) is missing"),
    ] {
        let err = Profile::from_bytes(&tagged(ids, &[]), p).unwrap_err();
        assert!(err.to_string().contains(named), "{err}");
    }
    let mut cut = tagged(&all, &[]);
    cut.truncate(cut.len() - 1);
    assert!(Profile::from_bytes(&cut, p).is_err());
}

#[test]
fn event_groups_round_trip_and_must_match_the_events() {
    let p = Path::new("p.db");
    let mut grouped = small_profile();
    grouped
        .events
        .push(EventDesc::new("page-faults", Sampling::Period(1), "events"));
    for t in &mut grouped.threads {
        for n in &mut t.cct.nodes {
            n.costs.push(Default::default());
        }
    }
    grouped.read_with = vec![None, Some(0)];
    let back = Profile::from_bytes(&grouped.to_bytes().unwrap(), p).unwrap();
    assert_eq!(back.read_with, [None, Some(0)]);
    for bad in [vec![None], vec![None, Some(2)]] {
        let mut wrong = grouped.clone();
        wrong.read_with = bad;
        let err = Profile::from_bytes(&wrong.to_bytes().unwrap(), p).unwrap_err();
        assert!(err.to_string().contains("event groups"), "{err}");
    }
}
