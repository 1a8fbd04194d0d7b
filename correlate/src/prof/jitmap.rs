//! Code compiled at run time, named by the map its compiler wrote for perf: `/tmp/perf-PID.map`,
//! one `START SIZE NAME` line per function (hexadecimal start and size), written by V8 (`node
//! --perf-basic-prof`), CPython 3.12+ (`-X perf`), Java agents, LuaJIT, Julia and others; and
//! by the process's jitdump where its profile lists one (`jit-PID.dump`, see
//! [`crate::prof::jitdump`]), whose functions come after the map's.
//!
//! An address no module covers is looked up in the map of the process that sampled it, read once
//! per process at correlation time. A map lists every function the run compiled, later lines for
//! code put where earlier code was: of lines with the same start the latest names the code, of
//! overlapping ones the one starting nearest below the address (no map says when its lines were
//! written, so a sample of code that was later replaced is named by its replacement). A map must
//! be a regular file owned by the user correlating or by root, as perf requires (`/tmp` is
//! everyone's, and anyone could plant a map for a process to come), last written during the
//! run (not left by an earlier process of the same id).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use profiler::envelope::open_regular;
use serde::{Deserialize, Serialize};

use crate::prof::jitdump;
use crate::prof::jitname::{symbol, JitSymbol};

/// One process's map: functions by start address.
#[derive(Debug, Default)]
struct JitMap {
    /// (start, end, symbol, the file it came from), sorted by start; of lines with the same
    /// start, the latest.
    functions: Vec<Function>,
    /// The files read: the perf map, the jitdump.
    sources: Vec<PathBuf>,
    /// What each of the jitdump's code-load and code-move records placed, in record order.
    loads: Vec<Option<jitdump::Placed>>,
}

/// One function of a map: start, end, symbol, and the index of the file it came from.
type Function = (u64, u64, JitSymbol, usize);

/// How the maps of one correlation went, per process: what the summary says.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct JitUse {
    /// Per map used, the distinct addresses it named.
    pub(crate) named: BTreeMap<PathBuf, u64>,
    /// Maps there but not used, each with why.
    pub(crate) refused: BTreeMap<PathBuf, String>,
    /// The Python functions the maps named (CPython's trampolines).
    #[serde(default)]
    pub(crate) python: PythonUse,
}

impl JitUse {
    /// Add what another share of the correlation found.
    pub(crate) fn merge(&mut self, later: JitUse) {
        for (path, n) in later.named {
            *self.named.entry(path).or_default() += n;
        }
        self.refused.extend(later.refused);
        self.python.merge(&later.python);
    }

    /// The summary's lines about JIT code, if any map was found.
    pub(crate) fn lines(&self) -> Vec<String> {
        let named = self
            .named
            .iter()
            .map(|(path, n)| format!("JIT code: {n} addresses named by {}", path.display()));
        let refused = self
            .refused
            .iter()
            .map(|(path, why)| format!("warning: JIT map {} not used: {why}", path.display()));
        named.chain(refused).chain(self.python.lines()).collect()
    }
}

/// How the Python side of a correlation went: what the summary says.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PythonUse {
    /// Samples with at least one Python function in their path.
    pub(crate) samples: u64,
    /// Samples below the interpreter's evaluator with no Python function above it
    /// (trampolines off: CPython before 3.12, `PYTHONPERFSUPPORT=0`, a process attached to).
    pub(crate) unnamed: u64,
}

impl PythonUse {
    /// Add what another share of the correlation found.
    pub(crate) fn merge(&mut self, later: &PythonUse) {
        self.samples += later.samples;
        self.unnamed += later.unnamed;
    }

    /// The summary's lines about Python code, if any.
    pub(crate) fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if self.samples > 0 {
            lines.push(format!(
                "Python: {} samples with their Python functions",
                self.samples
            ));
        }
        if self.unnamed > 0 {
            lines.push(format!(
                "Python: {} samples in the interpreter's evaluator without their Python \
                 function (its start-up, before its first thread runs Python; measured without \
                 hpcrun-rs's frame reader: before 3.12 or with PYTHONPERFSUPPORT=0)",
                self.unnamed
            ));
        }
        lines
    }
}

/// The maps of the processes met so far, read on first use.
#[derive(Debug, Default)]
pub(crate) struct JitMaps {
    /// The jitdump of each process that has one, from the profiles' modules.
    dumps: BTreeMap<u32, PathBuf>,
    /// The run being enriched: its start and end (ns since the epoch).
    run: (u64, u64),
    /// Per (process, run start), its map, read on first use.
    maps: BTreeMap<(u32, u64), Option<JitMap>>,
    /// The (process, address) pairs named so far.
    seen: fxhash::FxHashSet<(u32, u64)>,
    /// Each process's parent, where the profile knows it.
    parents: BTreeMap<u32, u32>,
    /// What was used and refused.
    pub(crate) used: JitUse,
    /// Module stores whose `jit/` directories hold copies of the maps and dumps.
    stores: Vec<PathBuf>,
}

impl JitMaps {
    /// The maps of the processes whose jitdumps are among the modules at `paths`; a copy in
    /// one of the module `stores` (`hpcrun-rs --bundle`) is read rather than the original.
    pub(crate) fn new<'p>(
        paths: impl IntoIterator<Item = &'p str>,
        stores: Vec<PathBuf>,
    ) -> JitMaps {
        let dumps = (paths.into_iter())
            .filter_map(|p| Some((profiler::bundle::jitdump_pid(p)?, PathBuf::from(p))))
            .collect();
        JitMaps {
            dumps,
            stores,
            ..JitMaps::default()
        }
    }

    /// The addresses asked about next are of a run from `start_ns` to `end_ns` (ns since the
    /// epoch): a file last written outside that time is another process's, one that had the
    /// same id (or a run on another machine), and is not used.
    pub(crate) fn run(&mut self, start_ns: u64, end_ns: u64) {
        self.run = (start_ns, end_ns);
    }

    /// The processes of the run asked about next, each with its parent (0 where unknown).
    pub(crate) fn parents(&mut self, processes: impl IntoIterator<Item = (u32, u32)>) {
        self.parents = processes.into_iter().filter(|p| p.1 != 0).collect();
    }

    /// The function of process `pid` at runtime address `addr`, from the process's map, else
    /// from its parent's, and so on up: a forked child runs the code its parent compiled, at
    /// the same addresses, but a JIT writes only what it compiles itself into the child's map
    /// (CPython 3.12's trampolines); a child that `exec`s a JIT writes its own map, which wins.
    pub(crate) fn symbol(&mut self, pid: u32, addr: u64) -> Option<JitSymbol> {
        let mut process = pid;
        for _ in 0..MAX_ANCESTORS {
            if let Some(symbol) = self.own_symbol(process, addr) {
                return Some(symbol);
            }
            process = *self.parents.get(&process).filter(|&&p| p != process)?;
        }
        None
    }

    /// The function that load `load` of a jitdump placed at runtime address `addr` (hpcrun-rs's
    /// JIT frames: the load in effect when the sample was taken), from the jitdump of process
    /// `pid` or, where it has none, of its nearest ancestor that has one; else, as
    /// [`JitMaps::symbol`], the function at the address.
    pub(crate) fn symbol_of_load(&mut self, pid: u32, load: u32, addr: u64) -> Option<JitSymbol> {
        let mut process = pid;
        for _ in 0..MAX_ANCESTORS {
            if self.dumps.contains_key(&process) {
                self.own_symbol(process, addr)?; // read the map; count the address as named
                let map = self.maps.get(&(process, self.run.0))?.as_ref()?;
                let placed = map.loads.get(load as usize)?.as_ref();
                return match placed.filter(|(start, end, _)| (*start..*end).contains(&addr)) {
                    Some((_, _, symbol)) => Some(symbol.clone()),
                    None => self.symbol(pid, addr),
                };
            }
            process = *self.parents.get(&process).filter(|&&p| p != process)?;
        }
        self.symbol(pid, addr)
    }

    /// The function at `addr` in process `pid`'s own map.
    fn own_symbol(&mut self, pid: u32, addr: u64) -> Option<JitSymbol> {
        let run = self.run;
        let (used, stores) = (&mut self.used, &self.stores);
        let dump = self.dumps.get(&pid).map(|d| bundled(stores, run.0, pid, d));
        let map = (self.maps.entry((pid, run.0))).or_insert_with(|| {
            let map = bundled(stores, run.0, pid, &map_path(pid));
            read_maps(&map, dump.as_ref(), run, used)
        });
        let map = map.as_ref()?;
        let i = map.functions.partition_point(|f| f.0 <= addr);
        let (_, _, symbol, source) = map.functions[..i].iter().rev().find(|f| addr < f.1)?;
        if self.seen.insert((pid, addr)) {
            *used.named.entry(map.sources[*source].clone()).or_default() += 1;
        }
        Some(symbol.clone())
    }
}

/// How many generations of parents a JIT address is looked up in.
const MAX_ANCESTORS: usize = 16;

/// Where process `pid`'s map is.
fn map_path(pid: u32) -> PathBuf {
    profiler::bundle::perf_map(pid)
}

/// The copy of process `pid`'s JIT file `original` (of the run that started at `run_start`) in
/// the first of `stores` that has one, else `original`.
fn bundled(stores: &[PathBuf], run_start: u64, pid: u32, original: &Path) -> PathBuf {
    let copies = (original.file_name().into_iter()).flat_map(|name| {
        stores
            .iter()
            .map(move |s| profiler::bundle::jit_dir(s, run_start, pid).join(name))
    });
    copies
        .into_iter()
        .find(|c| c.is_file())
        .unwrap_or_else(|| original.to_path_buf())
}

/// Read a process's perf map (at `map`) and its jitdump (`dump`), noting in `used` why a
/// file there is not used; `None` where neither is.
fn read_maps(
    map: &Path,
    dump: Option<&PathBuf>,
    run: (u64, u64),
    used: &mut JitUse,
) -> Option<JitMap> {
    let mut lines: Vec<Function> = Vec::new();
    let mut sources = Vec::new();
    let mut loads = Vec::new();
    if let Some(file) = trusted(map, run, used) {
        let n = sources.len();
        lines.extend(parse_text(BufReader::new(file)).map(|(a, b, s)| (a, b, s, n)));
        sources.push(map.to_path_buf());
    }
    if let Some(path) = dump {
        if let Some(loaded) = trusted(path, run, used).and_then(jitdump::read) {
            let n = sources.len();
            let placed = loaded.iter().flatten().cloned();
            lines.extend(placed.map(|(a, b, s)| (a, b, s, n)));
            sources.push(path.clone());
            loads = loaded;
        }
    }
    (!sources.is_empty()).then(|| JitMap {
        loads,
        ..index(lines, sources)
    })
}

/// The file at `path`, opened, if it is a regular file owned by the user correlating or by
/// root and last written during the `run` (start, end; ns since the epoch, give or take a
/// slack: [`profiler::bundle::jit_distrust`]); a file there but refused is noted in `used` with
/// why.
fn trusted(path: &Path, run: (u64, u64), used: &mut JitUse) -> Option<std::fs::File> {
    let file = open_regular(path).ok()?;
    let meta = file.metadata().ok()?;
    match profiler::bundle::jit_distrust(&meta, run) {
        None => Some(file),
        Some(why) => {
            used.refused.insert(path.to_path_buf(), why.to_string());
            None
        }
    }
}

/// The functions of a map's text; lines that do not parse are skipped.
fn parse_text(text: impl BufRead) -> impl Iterator<Item = (u64, u64, JitSymbol)> {
    text.lines()
        .map_while(Result::ok)
        .filter_map(|line| parse_line(&line))
}

/// Functions in the order their files gave them (from `sources`), indexed by start: of those
/// with the same start, the latest.
fn index(mut lines: Vec<Function>, sources: Vec<PathBuf>) -> JitMap {
    // Latest first among equal starts, then keep the first of each start: later lines win.
    let mut order: Vec<usize> = (0..lines.len()).collect();
    order.sort_by_key(|&i| (lines[i].0, std::cmp::Reverse(i)));
    order.dedup_by_key(|i| lines[*i].0);
    let mut functions: Vec<Function> = order
        .into_iter()
        .map(|i| std::mem::replace(&mut lines[i], (0, 0, empty(), 0)))
        .collect();
    functions.sort_by_key(|f| f.0);
    JitMap {
        functions,
        sources,
        loads: Vec::new(),
    }
}

/// A placeholder for a line moved out.
fn empty() -> JitSymbol {
    JitSymbol {
        name: String::new(),
        file: None,
        line: None,
    }
}

/// One `START SIZE NAME` line.
fn parse_line(line: &str) -> Option<(u64, u64, JitSymbol)> {
    let mut parts = line.splitn(3, ' ');
    let start = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
    let size = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
    let name = parts.next()?.trim();
    (size > 0 && !name.is_empty()).then(|| (start, start.saturating_add(size), symbol(name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_name_functions_the_latest_line_winning() {
        let text = "7f00 180 JS:*fib /tmp/jit/fib.js:1:13\n\
                    8000 40 py::work:/app/w.py\n\
                    8100 b py::_find_and_load:<frozen importlib._bootstrap>\n\
                    bad line\n\
                    9000 10 jit_loop\n\
                    7f00 100 JS:^fib /tmp/jit/fib.js:1:13\n";
        let lines = parse_text(text.as_bytes())
            .map(|(a, b, s)| (a, b, s, 0))
            .collect();
        let map = index(lines, vec![map_path(1)]);
        let find = |addr: u64| {
            let i = map.functions.partition_point(|f| f.0 <= addr);
            let found = map.functions[..i].iter().rev().find(|f| addr < f.1);
            found.map(|f| f.2.clone())
        };
        let fib = find(0x7f10).unwrap();
        assert_eq!(fib.name, "JS:^fib", "the later line wins");
        assert_eq!(fib.file.as_deref(), Some("/tmp/jit/fib.js"));
        assert_eq!(fib.line, Some(1));
        assert_eq!(find(0x8050), None, "past the later line's end");
        let py = find(0x8001).unwrap();
        assert_eq!(
            (py.name.as_str(), py.file.as_deref()),
            ("py::work", Some("/app/w.py"))
        );
        let frozen = find(0x8101).unwrap();
        assert_eq!(
            (frozen.name.as_str(), frozen.file.as_deref()),
            ("py::_find_and_load", Some("<frozen importlib._bootstrap>"))
        );
        assert_eq!(find(0x9005).unwrap().name, "jit_loop");
        assert_eq!(find(0x9010), None);
    }
}
