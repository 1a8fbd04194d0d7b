//! What an analysis is asked to do and what it gives back: its options, the scope tree with
//! the addresses it answers for, and a summary for the user.

use crate::scope::ScopeTree;
use profiler::addr::Svma;
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

/// How to analyse.
#[derive(Clone, Debug)]
pub struct Options {
    /// Worker threads; 0 means one per core.
    pub threads: usize,
    /// Whether to decode code and recover loops (off: procedures, inlining and lines only).
    pub loops: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            threads: 0,
            loops: true,
        }
    }
}

/// Heuristics of the analysis that a user rarely changes. Kept apart from [`Options`] so that
/// new ones do not break callers that build `Options` with a struct literal.
#[derive(Clone, Debug)]
pub struct Heuristics {
    /// Infer inlined code from procedure bounds and the line map where DWARF has no inline
    /// records for it (the thesis's fallback); off: such code stays in its host procedure.
    pub line_map_aliens: bool,
}

impl Default for Heuristics {
    fn default() -> Self {
        Heuristics {
            line_map_aliens: true,
        }
    }
}

/// Where the debug information came from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum DebugSource {
    /// The binary itself.
    Embedded,
    /// A separate debug file.
    Separate(PathBuf),
    /// None found: symbols only.
    #[default]
    None,
}

/// Counts and notes about one analysis, for the user (the default: nothing found).
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Procedures recovered.
    pub procedures: usize,
    /// Inlined-call scopes in the tree.
    pub inlined: usize,
    /// Of those, the ones inferred from the line map (no inline records in DWARF).
    pub inferred_inlined: usize,
    /// Loops in the tree.
    pub loops: usize,
    /// The loops among them that are irreducible regions (several entries), kept in the tree
    /// as loops headed by their first entry.
    pub irreducible_loops: Vec<IrreducibleLoop>,
    /// Indirect jumps in the analysed code whose targets could not be found (computed gotos,
    /// calls through pointers in tail position, table shapes not recognised): code reached
    /// only through them is analysed on its own and never enters a loop around it.
    pub unresolved_jumps: usize,
    /// Loops (not among the irreducible ones) entered at several blocks from copies of one test
    /// that the compiler duplicated before the loop and at its bottom: natural loops of the
    /// source, each analysed as entered through one virtual block that holds the test.
    pub duplicated_tests: usize,
    /// Loops (not among the irreducible ones) entered also at short blocks that lead straight
    /// to their header, a tail the compiler merged with the code before the loop: natural once
    /// each such block is split for the path from outside (node splitting).
    pub split_entries: usize,
    /// Statements in the tree.
    pub statements: usize,
    /// DWARF compilation units read.
    pub units: usize,
    /// Line programs read without a unit (`.debug_info` stripped, or the unit unreadable).
    pub unitless_line_programs: usize,
    /// Where the debug information came from.
    pub debug_source: DebugSource,
    /// Things skipped (corrupt units, undecodable code), one line each.
    pub skipped: Vec<String>,
    /// Wall time of the analysis.
    pub elapsed: Duration,
}

/// An irreducible loop (a cycle with several entries), as reported in the [`Summary`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IrreducibleLoop {
    /// The procedure holding it.
    pub procedure: String,
    /// Its begin line's file ("" if unknown) and line (0 if unknown).
    pub file: String,
    /// Its begin line.
    pub line: u32,
    /// Addresses where control enters it, header first (at least two).
    pub entries: Vec<u64>,
}

/// The result of analysing one binary.
pub struct Analysis {
    /// The module's structure, finished (lookups work).
    pub tree: ScopeTree,
    /// What was found and skipped.
    pub summary: Summary,
    /// The addresses for which `tree` answers as a whole-module analysis would: everything
    /// for [`analyze_file`](crate::analyze_file), the analysed procedures and the asked addresses for
    /// [`analyze_focused`](crate::analyze_focused).
    pub coverage: Coverage,
}

/// The addresses a tree answers for as a whole-module analysis would.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Coverage {
    /// The whole module.
    Module,
    /// These link-time ranges (sorted, disjoint).
    Ranges(Vec<Range<u64>>),
}

impl Coverage {
    /// Whether the tree answers for `addr`.
    pub fn covers(&self, addr: Svma) -> bool {
        let Svma(addr) = addr;
        match self {
            Coverage::Module => true,
            Coverage::Ranges(r) => {
                let i = r.partition_point(|g| g.end <= addr);
                r.get(i).is_some_and(|g| g.start <= addr)
            }
        }
    }
}
