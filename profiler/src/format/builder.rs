//! Profiles put together by hand, one calling path at a time: what tests and synthetic inputs
//! build instead of spelling out the format's parts and tree nodes (the parts added to the
//! format later start empty, as in [`Profile::new`]).

use crate::format::addr::Svma;
use crate::format::calltree::{AddrKind, Cct, CctNode, CctNodeId, Cost, Frame, ProfileModuleId};
use crate::format::db::{EventDesc, ModuleInfo, Profile, ThreadProfile};

/// A profile under construction.
#[derive(Debug, Clone)]
pub struct ProfileBuilder {
    profile: Profile,
}

impl ProfileBuilder {
    /// A profile of `command` sampling `event`, on host `test`, that ended at 1 ns: no module
    /// and no thread yet.
    pub fn new(command: &str, event: EventDesc) -> Self {
        let mut profile = Profile::new(vec![command.to_string()], vec![event]);
        profile.host = "test".into();
        profile.end_ns = 1;
        ProfileBuilder { profile }
    }

    /// The run's wall-clock start and end, ns since the epoch.
    pub fn times(mut self, start_ns: u64, end_ns: u64) -> Self {
        (self.profile.start_ns, self.profile.end_ns) = (start_ns, end_ns);
        self
    }

    /// Add the module at `path` (no build-id or checksum); the first added is module 0.
    pub fn module(mut self, path: &str) -> Self {
        self.profile.modules.push(ModuleInfo {
            path: path.to_string(),
            build_id: None,
            checksum: None,
        });
        self
    }

    /// Add a thread, with an empty tree; the paths that follow go into it.
    pub fn thread(mut self, pid: u32, tid: u32, comm: &str) -> Self {
        let events = self.profile.events.len();
        self.profile.threads.push(ThreadProfile {
            pid,
            tid,
            comm: comm.to_string(),
            cct: Cct::new(events),
        });
        self
    }

    /// Add `samples` samples of `period` each at the end of `path` (outermost frame first)
    /// in the last thread added, creating the nodes the path does not share with earlier ones
    /// (in path order, so node ids follow the order of the calls).
    pub fn path(mut self, path: &[Frame], samples: u64, period: u64) -> Self {
        let events = self.profile.events.len();
        let cct = &mut (self.profile.threads.last_mut())
            .expect("a thread before its paths")
            .cct;
        let mut at = CctNodeId::ROOT;
        for frame in path {
            let found = (cct.nodes.iter().enumerate().skip(1))
                .find(|(_, n)| n.parent == at && n.frame == *frame)
                .map(|(i, _)| CctNodeId::from_index(i));
            at = found.unwrap_or_else(|| {
                cct.nodes.push(CctNode {
                    parent: at,
                    frame: *frame,
                    costs: vec![Cost::default(); events],
                });
                CctNodeId::from_index(cct.nodes.len() - 1)
            });
        }
        cct.nodes[at.index()].costs[0] += Cost {
            samples,
            value: samples * period,
        };
        self
    }

    /// The profile.
    pub fn build(self) -> Profile {
        self.profile
    }
}

/// A frame of code at `addr` of module `module`: where a sample was taken (`Ip`) or a return
/// address (`Return`).
pub fn code(module: u32, addr: u64, kind: AddrKind) -> Frame {
    Frame::Code {
        module: ProfileModuleId(module),
        addr: Svma(addr),
        kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::db::Sampling;

    #[test]
    fn paths_share_their_common_part_and_nodes_follow_the_calls() {
        let event = EventDesc::new("cpu-clock", Sampling::Period(1000), "ns");
        let p = ProfileBuilder::new("./app", event)
            .module("/app")
            .thread(1, 1, "app")
            .path(
                &[code(0, 0x10, AddrKind::Return), code(0, 0x20, AddrKind::Ip)],
                2,
                1000,
            )
            .path(
                &[code(0, 0x10, AddrKind::Return), code(0, 0x30, AddrKind::Ip)],
                1,
                1000,
            )
            .path(
                &[code(0, 0x10, AddrKind::Return), code(0, 0x20, AddrKind::Ip)],
                1,
                1000,
            )
            .build();
        let nodes = &p.threads[0].cct.nodes;
        assert_eq!(nodes.len(), 4);
        let parents: Vec<usize> = nodes.iter().map(|n| n.parent.index()).collect();
        assert_eq!(parents, [0, 0, 1, 1]);
        assert_eq!(
            nodes[2].costs[0],
            Cost {
                samples: 3,
                value: 3000
            }
        );
        assert_eq!(nodes[3].costs[0].samples, 1);
        assert_eq!(p.threads[0].cct.total(0).samples, 4);
        assert!(p.threads[0].cct.malformation(1, 1).is_none());
    }
}
