//! Checking a scope tree against an independent oracle: binutils' `addr2line -i -f`.
//!
//! For an address, both sides give the chain of frames, innermost first: the function and the
//! source position (for the innermost frame the line of the address, for each outer frame the
//! call site of the frame inside it). Functions are compared by [`Naming`]: by link name (as
//! `addr2line` prints it, independent of any demangler), by readable name (as
//! `addr2line -C` prints it, so our demangler is checked against libiberty's too), or with
//! the names gdb gives functions that have no link name ([`gdb_chains`]): binutils names such
//! a function differently depending on where in the chain it is and on which addresses it
//! was asked before, gdb always the same way. The tests and `scripts/bench-structure` use this to
//! measure agreement.

use crate::scope::{ScopeKind, ScopeTree};
use profiler::addr::Svma;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Which name of a function a comparison uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    /// The link name where one exists, else the plain name: `addr2line -i -f`.
    Link,
    /// The readable (demangled) name: `addr2line -C -i -f`.
    Readable,
    /// The readable name, compared with `addr2line -C -i -f`'s frames and lines and its names
    /// of functions with a link name, and gdb's names of functions without one
    /// ([`gdb_chains`]).
    Gdb,
}

/// The independent oracle a tree is compared with: an `addr2line` program (binutils', or
/// another that takes the same options and prints the same way, such as `llvm-addr2line`)
/// and which names to compare.
#[derive(Clone, Copy, Debug)]
pub struct Oracle<'a> {
    /// The program to run.
    pub program: &'a str,
    /// Which names to compare.
    pub naming: Naming,
}

impl Default for Oracle<'_> {
    /// binutils' `addr2line`, link names.
    fn default() -> Self {
        Oracle {
            program: "addr2line",
            naming: Naming::Link,
        }
    }
}

/// One frame of an inline chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Name of the function, as the [`Naming`] of the comparison says.
    pub function: String,
    /// Last component of the source file path.
    pub file: String,
    /// Source line (0 = unknown).
    pub line: u32,
}

/// The inline chain the tree gives for `svma`, innermost first, functions named as `naming`
/// says; `None` if no statement holds it.
pub fn tree_frames(tree: &ScopeTree, svma: Svma, naming: Naming) -> Option<Vec<Frame>> {
    let stmt = tree.lookup(svma)?;
    let mut frames = Vec::new();
    let mut file = basename(tree.scope_file(stmt).unwrap_or(""));
    let mut line = tree.get(stmt).line;
    for id in tree.ancestors(stmt) {
        let s = tree.get(id);
        let function = match naming {
            Naming::Link => s.link_name.as_ref().unwrap_or(&s.name).to_string(),
            Naming::Readable | Naming::Gdb => s.name.to_string(),
        };
        match s.kind {
            ScopeKind::Alien {
                call_file,
                call_line,
            } => {
                frames.push(Frame {
                    function,
                    file: file.clone(),
                    line,
                });
                file = basename(call_file.map_or("", |f| tree.file_name(f)));
                line = call_line;
            }
            ScopeKind::Procedure => frames.push(Frame {
                function,
                file: file.clone(),
                line,
            }),
            _ => {}
        }
    }
    Some(frames)
}

/// Run `addr2line -i -f -e binary` (the oracle's program, with `-C` unless the naming is
/// [`Naming::Link`]) on `addrs` and return each address's frames.
pub fn addr2line_frames(
    binary: &Path,
    addrs: &[Svma],
    oracle: &Oracle<'_>,
) -> std::io::Result<Vec<Vec<Frame>>> {
    let demangle = (oracle.naming != Naming::Link).then_some("-C");
    let mut child = Command::new(oracle.program)
        .args(demangle)
        .args(["-i", "-f", "-a", "-e"])
        .arg(binary)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let input: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();
    let mut stdin = child.stdin.take().expect("piped stdin");
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output()?;
    writer
        .join()
        .map_err(|_| std::io::Error::other("writer thread panicked"))??;
    Ok(parse_addr2line(&String::from_utf8_lossy(&output.stdout)))
}

/// Rename the functions of each chain that gdb names ([`gdb_chains`]) where gdb sees as many
/// frames; says for each chain whether it does (the others are left as they were).
pub fn rename(chains: &mut [Vec<Frame>], gdb: Vec<Vec<Option<String>>>) -> Vec<bool> {
    let rename = |(chain, names): (&mut Vec<Frame>, Vec<Option<String>>)| {
        let same_frames = chain.len() == names.len();
        if same_frames {
            for (frame, name) in chain.iter_mut().zip(names) {
                frame.function = name.unwrap_or(std::mem::take(&mut frame.function));
            }
        }
        same_frames
    };
    chains.iter_mut().zip(gdb).map(rename).collect()
}

/// The Python that [`gdb_chains`] runs in gdb, after `PCS = [...]`: one `chain:` line per
/// address, a tab-separated field per function: `=` for one with a C++ link name, else `+`
/// and its name. A function's block is nested in its caller's, which holds its code, but gdb
/// also nests an out-of-line member function of a class local to a function in the blocks of
/// that function (the code of the lambda of `main` in those of `main`): the walk stops at a
/// function's block that its superblock does not hold.
const GDB_CHAINS: &str = r#"
for pc in PCS:
    b = gdb.block_for_pc(pc)
    names = []
    while b is not None:
        up = b.superblock
        if b.function is not None:
            link = b.function.linkage_name
            names.append('=' if link.startswith('_Z') else '+' + b.function.name)
            if up is not None and not (up.start <= b.start and b.end <= up.end):
                break
        b = up
    print('chain:' + '\t'.join(names))
"#;

/// gdb's inline chain at each of `addrs`, innermost first, through gdb's Python API: the
/// blocks holding the address, from `gdb.block_for_pc` up its superblocks, each that is a
/// function's (an inlined call's or the procedure's) giving a frame. A frame's function is
/// named (`Some`) when it has no C++ link name: binutils names such a function by its
/// `DW_AT_name` in some places of a chain and by the symbol covering the address in others,
/// depending on the addresses asked before, while gdb computes one name from the DWARF,
/// qualified by its enclosing namespaces, classes and functions, with its parameter types for
/// a procedure (`(anonymous namespace)::count_matches(std::vector<...> const&)`). A function
/// with a link name is left unnamed (`None`): gdb demangles it dropping the return types of
/// template instances, so there binutils' `-C` names are the reference.
pub fn gdb_chains(binary: &Path, addrs: &[Svma]) -> std::io::Result<Vec<Vec<Option<String>>>> {
    let pcs: Vec<String> = addrs.iter().map(|a| format!("{a:#x}")).collect();
    let script = format!("python\nPCS = [{}]\n{GDB_CHAINS}end\n", pcs.join(", "));
    // A private directory of an unpredictable name for each call (tests call this from
    // several threads at once).
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("chains.gdb");
    std::fs::write(&path, script)?;
    let output = Command::new("gdb")
        .args(["-batch", "-nx", "-x"])
        .arg(&path)
        .arg(binary)
        .stderr(Stdio::inherit())
        .output();
    dir.close()?;
    let text = String::from_utf8_lossy(&output?.stdout).into_owned();
    let field = |f: &str| f.strip_prefix('+').map(str::to_string);
    let chains: Vec<Vec<Option<String>>> = text
        .lines()
        .filter_map(|l| l.strip_prefix("chain:"))
        .map(|l| l.split('\t').filter(|f| !f.is_empty()).map(field).collect())
        .collect();
    if chains.len() != addrs.len() {
        return Err(std::io::Error::other(format!(
            "gdb gave {} chains for {} addresses:\n{text}",
            chains.len(),
            addrs.len()
        )));
    }
    Ok(chains)
}

/// Parse `addr2line -a -i -f` output: an `0x…` address line, then function / `file:line` pairs.
fn parse_addr2line(text: &str) -> Vec<Vec<Frame>> {
    let mut out: Vec<Vec<Frame>> = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        if l.starts_with("0x") {
            out.push(Vec::new());
            continue;
        }
        let Some(pos) = lines.next() else { break };
        let pos = pos.split(" (discriminator").next().unwrap_or(pos);
        let (file, line) = pos.rsplit_once(':').unwrap_or((pos, "0"));
        if let Some(frames) = out.last_mut() {
            frames.push(Frame {
                function: l.to_string(),
                file: basename(file),
                line: line.trim().parse().unwrap_or(0),
            });
        }
    }
    out
}

fn basename(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).to_string()
}

/// Agreement of a tree with addr2line over a set of addresses.
#[derive(Clone, Debug, Default)]
pub struct Agreement {
    /// Addresses checked.
    pub checked: usize,
    /// Addresses not checked because the oracle cannot judge them: for [`Naming::Gdb`], gdb
    /// sees other frames there than `addr2line`.
    pub unjudged: Vec<Svma>,
    /// Addresses inside some statement of the tree.
    pub covered: usize,
    /// Covered addresses whose chain (functions and lines) equals addr2line's.
    pub agree: usize,
    /// Covered addresses whose line (of the innermost frame) equals addr2line's.
    pub line_agree: usize,
    /// Covered addresses whose chain has addr2line's shape: as many frames, at the same lines
    /// (call lines included), whatever the functions are named.
    pub shape_agree: usize,
    /// The disagreements: (address, ours, the oracle's).
    pub disagreements: Vec<(Svma, Vec<Frame>, Vec<Frame>)>,
}

/// Compare the tree's chains with binutils' addr2line's on `addrs`, functions by link name.
pub fn compare_with_addr2line(
    tree: &ScopeTree,
    binary: &Path,
    addrs: &[Svma],
) -> std::io::Result<Agreement> {
    compare_with_oracle(tree, binary, addrs, &Oracle::default())
}

/// Compare the tree's chains with `oracle`'s on `addrs`.
pub fn compare_with_oracle(
    tree: &ScopeTree,
    binary: &Path,
    addrs: &[Svma],
    oracle: &Oracle<'_>,
) -> std::io::Result<Agreement> {
    let naming = oracle.naming;
    let mut theirs = addr2line_frames(binary, addrs, oracle)?;
    let judged = match naming {
        Naming::Gdb => rename(&mut theirs, gdb_chains(binary, addrs)?),
        _ => vec![true; addrs.len()],
    };
    let mut a = Agreement::default();
    for ((&addr, their), judged) in addrs.iter().zip(&theirs).zip(judged) {
        if !judged {
            a.unjudged.push(addr);
            continue;
        }
        a.checked += 1;
        let Some(ours) = tree_frames(tree, addr, naming) else {
            continue;
        };
        a.covered += 1;
        let line = |frames: &[Frame]| frames.first().map(|f| f.line);
        a.line_agree += usize::from(line(&ours) == line(their));
        a.shape_agree += usize::from(same_shape(&ours, their));
        if same_chain(&ours, their) {
            a.agree += 1;
        } else {
            a.disagreements.push((addr, ours, their.clone()));
        }
    }
    Ok(a)
}

/// Whether two chains name the same functions at the same lines. Files are not compared:
/// binutils reports the caller's file for some frames of recursive inlining.
pub fn same_chain(a: &[Frame], b: &[Frame]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.function == y.function && x.line == y.line)
}

/// Whether two chains have as many frames at the same lines, names aside.
pub fn same_shape(a: &[Frame], b: &[Frame]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.line == y.line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_addr2line_output() {
        let text = "0x0000000000001184\n_S_right\n/usr/include/stl_tree.h:788\nmain\n/src/a.cc:17 (discriminator 2)\n0x10\n??\n??:0\n";
        let f = parse_addr2line(text);
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].len(), 2);
        assert_eq!(
            f[0][1],
            Frame {
                function: "main".into(),
                file: "a.cc".into(),
                line: 17
            }
        );
        assert_eq!(f[1][0].function, "??");
    }
}
