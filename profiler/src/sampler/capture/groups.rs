//! Event groups (`-e '{LEADER,MEMBER,...}'`, perf's `{a,b}:S`): the leader samples and each of
//! its samples carries the counts of every member (`PERF_SAMPLE_READ` with
//! `PERF_FORMAT_GROUP`), so that ratios per calling context (instructions per cycle, faults
//! per CPU millisecond) come from the same instants rather than from independent samples.
//!
//! A member's cost at a context is what it counted, in the sampled thread, since that thread's
//! previous leader sample: the recorder keeps each thread's last counts (see [`GroupReads`]).
//! Reading a group with the samples of inherited events (every thread of the command) needs
//! Linux 6.12; where the kernel refuses it, the events are sampled independently instead and
//! the run says so.

use byteorder::LittleEndian;
use fxhash::FxHashMap;
use linux_perf_event_reader::RawData;
use perf_event_open_sys::bindings as sys;

use crate::format::db::{Sampling, ThreadProfile};
use crate::sampler::capture::events::{EventClass, EventSpec, Grouping, SpecError};

/// Split the text of `-e` options into event texts at commas outside braces, so that
/// `cpu-clock,{cycles,instructions}` is `cpu-clock` and the group `{cycles,instructions}`.
pub fn split_event_list(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(text[start..].trim());
    parts.retain(|p| !p.is_empty());
    parts
}

/// Parse `{LEADER[@RATE],MEMBER,...}` (optionally followed by perf's `:S`, which changes
/// nothing here): the leader sampled as `-e` says, each member counted and read with its
/// samples. A group of one event is that event alone.
pub fn parse_group(text: &str) -> Result<Vec<EventSpec>, SpecError> {
    let inner = text.strip_suffix(":S").unwrap_or(text);
    let inner = (inner.strip_prefix('{').and_then(|t| t.strip_suffix('}'))).ok_or_else(|| {
        SpecError::Group(format!(
            "'{text}': a group is written {{LEADER,MEMBER,...}}"
        ))
    })?;
    let names: Vec<&str> = inner.split(',').map(str::trim).collect();
    let mut specs = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let mut spec = EventSpec::parse(name)?;
        if matches!(spec.event.class, EventClass::Memory(_)) || spec.event.is_off_cpu() {
            return Err(SpecError::Group(format!(
                "'{}' cannot be in an event group: give it its own -e",
                spec.event.name
            )));
        }
        if i > 0 && name.contains('@') {
            return Err(SpecError::Group(format!(
                "'{name}' in '{text}': a member is counted, not sampled, so only the leader \
                 (the first event) takes a rate"
            )));
        }
        spec.grouping = match (i, names.len()) {
            (_, 1) => Grouping::Alone,
            (0, _) => Grouping::Leader,
            _ => Grouping::Member,
        };
        if spec.grouping == Grouping::Member {
            // Every occurrence counts: the member's value is its exact count.
            spec.sampling = Sampling::Period(1);
        }
        specs.push(spec);
    }
    Ok(specs)
}

/// The same events, each sampled on its own (where the kernel cannot read a group with each
/// sample): members at their leader's rate.
pub fn ungrouped(specs: &[EventSpec]) -> Vec<EventSpec> {
    let mut leader_rate = None;
    (specs.iter())
        .map(|&s| match s.grouping {
            Grouping::Alone => s,
            Grouping::Leader => {
                leader_rate = Some(s.sampling);
                EventSpec {
                    grouping: Grouping::Alone,
                    ..s
                }
            }
            Grouping::Member => EventSpec {
                grouping: Grouping::Alone,
                sampling: leader_rate.unwrap_or(s.sampling),
                ..s
            },
        })
        .collect()
}

/// Per event of `specs`, the index of the leader whose samples read it; empty where no event
/// is in a group.
pub fn leaders<'a>(specs: impl Iterator<Item = &'a EventSpec>) -> Vec<Option<u32>> {
    let mut leader = None;
    let read_with: Vec<Option<u32>> = (0u32..)
        .zip(specs)
        .map(|(i, s)| match s.grouping {
            Grouping::Alone => None,
            Grouping::Leader => {
                leader = Some(i);
                None
            }
            Grouping::Member => leader,
        })
        .collect();
    match read_with.iter().any(Option::is_some) {
        true => read_with,
        false => Vec::new(),
    }
}

/// One line per group member of `specs` whose whole count (`counted`, per metric: what the
/// kernel counted over the run) is more than its threads' leader samples carried into
/// `threads`: the rest came after a thread's last sample.
pub(crate) fn unread_counts(
    specs: &[(EventSpec, Option<String>)],
    counted: &[Option<u64>],
    threads: &[ThreadProfile],
) -> Vec<String> {
    let leaders = leaders(specs.iter().map(|(s, _)| s));
    let mut lines = Vec::new();
    for (m, leader) in leaders.iter().enumerate() {
        let (Some(leader), Some(Some(total))) = (leader, counted.get(m)) else {
            continue;
        };
        let read: u64 = (threads.iter())
            .flat_map(|t| &t.cct.nodes)
            .filter_map(|n| n.costs.get(m))
            .map(|c| c.value)
            .sum();
        if *total > read {
            lines.push(format!(
                "{} of the {total} {} counted came after their thread's last {} sample: not in \
                 the profile",
                total - read,
                specs[m].0.event.name,
                specs[*leader as usize].0.event.name
            ));
        }
    }
    lines
}

/// Whether `specs` hold a group.
pub fn has_group(specs: &[EventSpec]) -> bool {
    specs.iter().any(|s| s.grouping == Grouping::Leader)
}

/// Give a group leader's attribute `a` the reading of its group with each sample.
pub(crate) fn read_with_samples(a: &mut sys::perf_event_attr) {
    a.sample_type |= sys::PERF_SAMPLE_READ as u64;
    a.read_format = (sys::PERF_FORMAT_GROUP | sys::PERF_FORMAT_ID) as u64;
}

/// The attribute of a group member: counting (no period, no samples, no side band), in every
/// thread of the command, enabled and disabled with its leader.
pub(crate) fn member_attr(type_: u32, config: u64, exclude_kernel: bool) -> sys::perf_event_attr {
    let mut a = sys::perf_event_attr {
        size: std::mem::size_of::<sys::perf_event_attr>() as u32,
        type_,
        config,
        read_format: sys::PERF_FORMAT_ID as u64,
        // Never sampled; but the kernel (6.12 on) keeps the members of an inherited group read
        // with samples to the leader's kind.
        sample_type: (sys::PERF_SAMPLE_READ | sys::PERF_SAMPLE_TID) as u64,
        ..Default::default()
    };
    a.set_inherit(1);
    a.set_exclude_kernel(exclude_kernel as u64);
    a.set_exclude_hv(1);
    // A group's events keep one clock: the leader's (see `perf::attr`).
    a.set_use_clockid(1);
    a.clockid = libc::CLOCK_MONOTONIC;
    a
}

/// Where a leader's samples hold their group's counts: the byte offset of the read block in a
/// sample record's data for `sample_type`, that is past the fields the kernel writes before it
/// (identifier, ip, pid/tid, time, addr, id, stream id, cpu, period: 8 bytes each).
pub fn read_block_offset(sample_type: u64) -> usize {
    let before = [
        sys::PERF_SAMPLE_IDENTIFIER,
        sys::PERF_SAMPLE_IP,
        sys::PERF_SAMPLE_TID,
        sys::PERF_SAMPLE_TIME,
        sys::PERF_SAMPLE_ADDR,
        sys::PERF_SAMPLE_ID,
        sys::PERF_SAMPLE_STREAM_ID,
        sys::PERF_SAMPLE_CPU,
        sys::PERF_SAMPLE_PERIOD,
    ];
    8 * before
        .iter()
        .filter(|&&b| sample_type & b as u64 != 0)
        .count()
}

/// The (event id, count) pairs of the read block at `offset` of a sample's `data`
/// (`PERF_FORMAT_GROUP | PERF_FORMAT_ID`: the number of events, then each one's count and id);
/// `None` where the record is too short for what it says it holds.
pub fn group_counts(data: RawData<'_>, offset: usize) -> Option<Vec<(u64, u64)>> {
    let mut block = data.get(offset..data.len())?;
    let mut word = || block.read_u64::<LittleEndian>().ok();
    let n = usize::try_from(word()?).ok()?;
    // No group has more events than a record has words.
    if n > data.len() / 16 {
        return None;
    }
    (0..n)
        .map(|_| {
            let count = word()?;
            Some((word()?, count))
        })
        .collect()
}

/// Each thread's last counts of each group member, to turn the running counts of a leader's
/// samples into what was counted since that thread's previous sample.
#[derive(Default)]
pub struct GroupReads {
    last: FxHashMap<(u32, u64), u64>,
}

impl GroupReads {
    /// What member `id` counted in thread `tid` since the last reading, now that it reads
    /// `count`. A count lower than the last is a new thread of a reused id, counted from zero.
    pub fn delta(&mut self, tid: u32, id: u64, count: u64) -> u64 {
        let last = self.last.insert((tid, id), count).unwrap_or(0);
        if count >= last {
            count - last
        } else {
            count
        }
    }

    /// Forget thread `tid` (it ended).
    pub fn forget(&mut self, tid: u32) {
        self.last.retain(|&(t, _), _| t != tid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_split_outside_braces_only() {
        assert_eq!(
            split_event_list("cpu-clock, {cycles,instructions}:S,page-faults"),
            ["cpu-clock", "{cycles,instructions}:S", "page-faults"]
        );
        assert_eq!(split_event_list("{a,b}"), ["{a,b}"]);
    }

    #[test]
    fn a_group_has_a_sampled_leader_and_counted_members() {
        let specs = parse_group("{cpu-clock@f4000,page-faults,context-switches}").unwrap();
        let roles: Vec<_> = specs.iter().map(|s| (s.event.name, s.grouping)).collect();
        assert_eq!(
            roles,
            [
                ("cpu-clock", Grouping::Leader),
                ("page-faults", Grouping::Member),
                ("context-switches", Grouping::Member)
            ]
        );
        assert_eq!(specs[0].sampling, Sampling::Frequency(4000));
        assert_eq!(specs[1].sampling, Sampling::Period(1));
        let alone = parse_group("{task-clock}:S").unwrap();
        assert_eq!(alone[0].grouping, Grouping::Alone);
        assert_eq!(leaders(specs.iter()), [None, Some(0), Some(0)]);
        let apart = ungrouped(&specs);
        assert!(apart.iter().all(|s| s.grouping == Grouping::Alone));
        assert!(leaders(apart.iter()).is_empty());
        assert_eq!(apart[2].sampling, Sampling::Frequency(4000));
    }

    #[test]
    fn groups_refuse_what_they_cannot_hold() {
        for (text, says) in [
            ("{cpu-clock,page-faults@10}", "only the leader"),
            ("{cpu-clock,off-cpu}", "its own -e"),
            ("{cpu-clock,bogus}", "unknown event 'bogus'"),
            ("{cpu-clock,page-faults", "is written"),
        ] {
            let err = parse_group(text).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn counts_after_the_last_samples_are_said() {
        use crate::format::db::{Cct, CctNode, CctNodeId, Cost, Frame};
        let specs: Vec<(EventSpec, Option<String>)> = (parse_group("{cpu-clock,page-faults}"))
            .unwrap()
            .into_iter()
            .map(|s| (s, None))
            .collect();
        let cost = |value| Cost { samples: 1, value };
        let thread = ThreadProfile {
            pid: 1,
            tid: 1,
            comm: "a".into(),
            cct: Cct {
                nodes: vec![CctNode {
                    parent: CctNodeId::ROOT,
                    frame: Frame::Root,
                    costs: vec![cost(1000), cost(90)],
                }],
            },
        };
        let lines = unread_counts(&specs, &[None, Some(100)], std::slice::from_ref(&thread));
        assert_eq!(
            lines,
            [
                "10 of the 100 page-faults counted came after their thread's last cpu-clock \
              sample: not in the profile"
            ]
        );
        assert!(unread_counts(&specs, &[None, Some(90)], &[thread]).is_empty());
    }

    #[test]
    fn read_blocks_are_found_and_read() {
        let st = (sys::PERF_SAMPLE_IDENTIFIER
            | sys::PERF_SAMPLE_IP
            | sys::PERF_SAMPLE_TID
            | sys::PERF_SAMPLE_TIME
            | sys::PERF_SAMPLE_CPU
            | sys::PERF_SAMPLE_PERIOD
            | sys::PERF_SAMPLE_READ
            | sys::PERF_SAMPLE_STACK_USER) as u64;
        assert_eq!(read_block_offset(st), 48);
        let mut data = vec![0u8; 48];
        for w in [2u64, 1000, 7, 33, 9] {
            data.extend(w.to_le_bytes());
        }
        let read = |bytes: &[u8]| group_counts(RawData::from(bytes), 48);
        assert_eq!(read(&data), Some(vec![(7, 1000), (9, 33)]));
        assert_eq!(read(&data[..80]), None, "cut short");
        let (a, b) = data.split_at(60);
        let wrapped = group_counts(RawData::Split(a, b), 48);
        assert_eq!(
            wrapped,
            Some(vec![(7, 1000), (9, 33)]),
            "around the ring's end"
        );
        let mut reads = GroupReads::default();
        assert_eq!(reads.delta(5, 9, 33), 33);
        assert_eq!(reads.delta(5, 9, 40), 7);
        assert_eq!(reads.delta(6, 9, 4), 4, "threads apart");
        assert_eq!(reads.delta(5, 9, 2), 2, "a new thread of the same id");
    }
}
