//! Which of the runtime's unnamed code addresses are spin-waits: the runtimes wait for other
//! threads in short loops around a `pause` instruction (GCC's `libgomp` and LLVM's `libomp`
//! alike) before they sleep, and their symbol tables do not name these static functions, so
//! the machine code says it. A sample there is idle time whatever the entry point above it.

use std::path::{Path, PathBuf};

use fxhash::FxHashSet;
use iced_x86::{Decoder, DecoderOptions, FlowControl, Mnemonic};
use object::read::ReadCache;
use object::{Object, ObjectSection, SectionKind};
use profiler::envelope::open_regular;

use crate::db::database::Database;
use crate::db::ids::DbNodeId;
use crate::db::label::unknown_address;
use crate::db::node::NodeKind;

/// How many instructions are followed from a sampled address looking for a `pause`: a spin
/// loop's body is a handful (load, compare, branch, `pause`, count).
const LOOK_AHEAD: usize = 12;

/// The `<unknown procedure>` nodes of `db` in the runtime modules (`runtime[m]`) whose address
/// is in a spin-wait loop.
pub(crate) fn spinning(
    db: &Database,
    runtime: &[bool],
    binaries: &[Option<PathBuf>],
) -> FxHashSet<DbNodeId> {
    let mut spinning = FxHashSet::default();
    for (m, _) in runtime.iter().enumerate().filter(|(_, &r)| r) {
        let nodes: Vec<(DbNodeId, u64)> = (db.nodes.iter().enumerate())
            .filter(|(_, n)| n.kind == NodeKind::Unknown && n.module.map(|m| m.index()) == Some(m))
            .filter_map(|(i, n)| Some((DbNodeId::from_index(i), unknown_address(&n.name)?)))
            .collect();
        if nodes.is_empty() {
            continue;
        }
        let Some(code) = binaries
            .get(m)
            .and_then(Option::as_deref)
            .and_then(read_code)
        else {
            continue;
        };
        let spins = nodes.into_iter().filter(|&(_, addr)| spins_at(&code, addr));
        spinning.extend(spins.map(|(id, _)| id));
    }
    spinning
}

/// A module's executable sections: (link-time address, bytes).
type Code = Vec<(u64, Vec<u8>)>;

/// The executable sections of the module at `path`, if it reads.
fn read_code(path: &Path) -> Option<Code> {
    let file = open_regular(path).ok()?;
    let cache = ReadCache::new(file);
    let elf = object::File::parse(&cache).ok()?;
    let text = elf.sections().filter(|s| s.kind() == SectionKind::Text);
    Some(
        text.filter_map(|s| Some((s.address(), s.data().ok()?.to_vec())))
            .collect(),
    )
}

/// Whether the code at `addr` reaches a `pause` within [`LOOK_AHEAD`] instructions, following
/// fall-throughs, jumps and backward branches (the loop's way round).
fn spins_at(code: &Code, addr: u64) -> bool {
    let Some((start, bytes)) = code
        .iter()
        .find(|(a, b)| addr >= *a && addr - *a < b.len() as u64)
    else {
        return false;
    };
    let mut seen = FxHashSet::default();
    let mut todo = vec![addr];
    while let Some(at) = todo.pop() {
        let mut decoder = Decoder::with_ip(64, bytes, *start, DecoderOptions::NONE);
        if at < *start || decoder.set_position((at - start) as usize).is_err() {
            continue;
        }
        decoder.set_ip(at);
        for _ in 0..LOOK_AHEAD {
            if !decoder.can_decode() || !seen.insert(decoder.ip()) {
                break;
            }
            let ins = decoder.decode();
            if ins.mnemonic() == Mnemonic::Pause {
                return true;
            }
            match ins.flow_control() {
                FlowControl::Next => {}
                FlowControl::ConditionalBranch => {
                    let target = ins.near_branch_target();
                    if target < ins.ip() {
                        todo.push(target);
                    }
                }
                FlowControl::UnconditionalBranch => {
                    todo.push(ins.near_branch_target());
                    break;
                }
                _ => break,
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::spins_at;

    #[test]
    fn a_pause_loop_spins_and_straight_code_does_not() {
        // 0x10: pause; add rax,1; cmp rax,rdx; je 0x30; mov ecx,[rbp]; cmp ebx,ecx; je 0x10; ret
        let spin = vec![
            0xf3, 0x90, 0x48, 0x83, 0xc0, 0x01, 0x48, 0x39, 0xd0, 0x74, 0x25, 0x8b, 0x4d, 0x00,
            0x39, 0xcb, 0x74, 0xee, 0xc3,
        ];
        let code = vec![(0x10, spin)];
        assert!(spins_at(&code, 0x10 + 2), "the count's add");
        assert!(
            spins_at(&code, 0x10 + 11),
            "the load, back through the loop's branch"
        );
        assert!(!spins_at(&code, 0x10 + 18), "the ret after it");
        let straight = vec![(0x10, vec![0x48, 0x83, 0xc0, 0x01, 0xc3])];
        assert!(!spins_at(&straight, 0x10));
    }
}
