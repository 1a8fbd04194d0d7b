//! Reading a database directory into the [`Experiment`] model: `meta.db` for the names and the
//! context tree, `profile.db` for the inclusive ("execution" scope) values of each thread
//! profile, from which the point values are derived (a context's inclusive value less its
//! children's). Point values themselves are not used: HPCToolkit's `hpcprof` records them at
//! instruction contexts that `meta.db` leaves out, and their cost belongs to the listed parent.
//! The summary profile and `cct.db` (the same values by context) are not needed: the views
//! derive them. `trace.db`, when present, gives the traces (see `trace`). Every offset, count and
//! pointer is checked; damage gives an error naming the file and offset, never a panic.

use std::path::Path;

use fxhash::{FxHashMap, FxHashSet};
use profiler::envelope::read_file;

use super::bytes::In;
use super::trace::read_traces;
use super::{Context, Experiment, Function, HpctoolkitError, Lexical, PointValue, Relation};

/// Read the database in `dir`.
pub(crate) fn read_dir(dir: &Path) -> Result<Experiment, HpctoolkitError> {
    let load = |name: &str| read_file(&dir.join(name)).map_err(HpctoolkitError::from);
    let trace = match dir.join("trace.db").exists() {
        true => Some(load("trace.db")?),
        false => None,
    };
    read_bytes(&load("meta.db")?, &load("profile.db")?, trace.as_deref())
}

/// The model in the bytes of a `meta.db`, a `profile.db` and, when traced, a `trace.db`.
pub(crate) fn read_bytes(
    meta: &[u8],
    profile: &[u8],
    trace: Option<&[u8]>,
) -> Result<Experiment, HpctoolkitError> {
    let meta = In {
        bytes: meta,
        name: "meta.db",
    };
    let mut meta = MetaReader::new(meta)?;
    let mut ex = meta.experiment()?;
    let profile = In {
        bytes: profile,
        name: "profile.db",
    };
    let threads = read_profiles(&profile, &meta, &mut ex)?;
    if let Some(bytes) = trace {
        let f = In {
            bytes,
            name: "trace.db",
        };
        ex.traces = read_traces(&f, &meta.ctx_ids, &threads)?;
    }
    Ok(ex)
}

/// `meta.db` with its tables indexed by offset.
struct MetaReader<'a> {
    f: In<'a>,
    sections: Vec<(u64, u64)>,
    modules: FxHashMap<u64, usize>,
    files: FxHashMap<u64, usize>,
    functions: FxHashMap<u64, usize>,
    /// propMetricId of a metric's execution (inclusive) scope -> metric index.
    inclusive_ids: FxHashMap<u16, usize>,
    /// Identifier kind names, by kind.
    kinds: Vec<String>,
    /// ctxId -> context index.
    ctx_ids: FxHashMap<u32, usize>,
}

impl<'a> MetaReader<'a> {
    fn new(f: In<'a>) -> Result<MetaReader<'a>, HpctoolkitError> {
        let sections = f.header(b"meta", b"_meta.db", 8)?;
        Ok(MetaReader {
            f,
            sections,
            modules: FxHashMap::default(),
            files: FxHashMap::default(),
            functions: FxHashMap::default(),
            inclusive_ids: FxHashMap::default(),
            kinds: Vec::new(),
            ctx_ids: FxHashMap::default(),
        })
    }

    /// The whole model but the values.
    fn experiment(&mut self) -> Result<Experiment, HpctoolkitError> {
        let f = &self.f;
        let title = f.string(f.u64(self.sections[0].1)?)?;
        let (names, nkinds) = (f.u64(self.sections[1].1)?, f.u8(self.sections[1].1 + 8)?);
        self.kinds = (0..u64::from(nkinds))
            .map(|k| f.string(f.u64(names + 8 * k)?))
            .collect::<Result<_, _>>()?;
        let modules = self.paths(5, true)?;
        let files = self.paths(6, false)?;
        let copied = self.copied()?;
        let functions = self.functions()?;
        let metrics = self.metrics()?;
        let contexts = self.contexts()?;
        Ok(Experiment {
            title,
            modules,
            files,
            copied,
            functions,
            metrics,
            contexts,
            ..Experiment::default()
        })
    }

    /// Header of table section `i`: (array, count, stride), the stride at least `min`.
    fn table(&self, i: usize, min: u64) -> Result<(u64, u64, u64), HpctoolkitError> {
        let at = self.sections[i].1;
        let (array, n, stride) = (self.f.u64(at)?, self.f.u32(at + 8)?, self.f.u16(at + 0xc)?);
        let (n, stride) = (u64::from(n), u64::from(stride));
        if stride < min {
            return Err(self
                .f
                .bad(at + 0xc, format!("structure size {stride} < {min}")));
        }
        self.f.slice(array, n.saturating_mul(stride))?;
        Ok((array, n, stride))
    }

    /// The paths of the Load Modules (`modules`) or Source Files section, indexed by offset.
    fn paths(&mut self, section: usize, modules: bool) -> Result<Vec<String>, HpctoolkitError> {
        let (array, n, stride) = self.table(section, 16)?;
        let mut out = Vec::new();
        for k in 0..n {
            let at = array + k * stride;
            out.push(self.f.string(self.f.u64(at + 8)?)?);
            let index = if modules {
                &mut self.modules
            } else {
                &mut self.files
            };
            index.insert(at, out.len() - 1);
        }
        Ok(out)
    }

    /// The source files whose `copied` flag is set (read from the database's directory).
    fn copied(&self) -> Result<FxHashSet<usize>, HpctoolkitError> {
        let (array, n, stride) = self.table(6, 16)?;
        let flagged = |k: &u64| self.f.u32(array + k * stride).map(|flags| flags & 1 != 0);
        let mut copied = FxHashSet::default();
        for k in 0..n {
            if flagged(&k)? {
                copied.insert(k as usize);
            }
        }
        Ok(copied)
    }

    /// A pointer into a table: 0 is none, anything else must be one of its structures.
    fn lookup(
        &self,
        index: &FxHashMap<u64, usize>,
        at: u64,
        what: &str,
    ) -> Result<Option<usize>, HpctoolkitError> {
        let p = self.f.u64(at)?;
        match (p, index.get(&p)) {
            (0, _) => Ok(None),
            (_, Some(&i)) => Ok(Some(i)),
            _ => Err(self.f.bad(at, format!("pointer {p:#x} is not a {what}"))),
        }
    }

    fn functions(&mut self) -> Result<Vec<Function>, HpctoolkitError> {
        let (array, n, stride) = self.table(7, 40)?;
        let mut out = Vec::new();
        for k in 0..n {
            let at = array + k * stride;
            let name = match self.f.u64(at)? {
                0 => None,
                p => Some(self.f.string(p)?),
            };
            out.push(Function {
                name,
                module: self.lookup(&self.modules, at + 8, "load module")?,
                offset: self.f.u64(at + 0x10)?,
                file: self.lookup(&self.files, at + 0x18, "source file")?,
                line: self.f.u32(at + 0x20)?,
            });
            self.functions.insert(at, k as usize);
        }
        Ok(out)
    }

    /// Metric names; notes which propagated ids hold each metric's inclusive values.
    fn metrics(&mut self) -> Result<Vec<String>, HpctoolkitError> {
        let f = &self.f;
        let at = self.sections[2].1;
        let (list, n) = (f.u64(at)?, u64::from(f.u32(at + 8)?));
        let (size, inst_size) = (u64::from(f.u8(at + 0xc)?), u64::from(f.u8(at + 0xd)?));
        if size < 0x1c || inst_size < 0xa {
            return Err(f.bad(at + 0xc, "metric structures too small"));
        }
        let mut names = Vec::new();
        for m in 0..n {
            let md = list + m * size;
            names.push(f.string(f.u64(md)?)?);
            let (insts, count) = (f.u64(md + 8)?, u64::from(f.u16(md + 0x18)?));
            for k in 0..count {
                let inst = insts + k * inst_size;
                let scope = f.string(f.u64(f.u64(inst)?)?)?;
                if scope == "execution" {
                    self.inclusive_ids.insert(f.u16(inst + 8)?, m as usize);
                }
            }
        }
        Ok(names)
    }

    /// The context tree, parents before children.
    fn contexts(&mut self) -> Result<Vec<Context>, HpctoolkitError> {
        let f = self.f;
        let (size, start) = self.sections[3];
        let (entries, n, stride) = (f.u64(start)?, f.u16(start + 8)?, f.u8(start + 0xa)?);
        let stride = u64::from(stride);
        if stride < 0x20 {
            return Err(f.bad(start + 0xa, "entry point structures too small"));
        }
        let mut out = Vec::new();
        // (array, size, parent) still to read; each array is read once, whatever the pointers.
        let mut todo = Vec::new();
        for k in 0..u64::from(n) {
            let at = entries + k * stride;
            let kind = f.u16(at + 0x14)?;
            self.new_id(f.u32(at + 0x10)?, at, out.len())?;
            out.push(Context {
                parent: None,
                relation: Relation::Lexical,
                lexical: Lexical::Entry(kind),
                function: None,
                src: None,
                point: None,
            });
            todo.push((f.u64(at + 8)?, f.u64(at)?, out.len() - 1));
        }
        let mut seen = FxHashSet::default();
        let section = start..start.saturating_add(size);
        while let Some((array, len, parent)) = todo.pop() {
            if len == 0 {
                continue;
            }
            let end = array.checked_add(len).filter(|e| *e <= section.end);
            if !section.contains(&array) || end.is_none() || !seen.insert(array) {
                return Err(f.bad(array, "children array outside the context tree or shared"));
            }
            let mut at = array;
            while at < array + len {
                let c = self.context(at, parent)?;
                self.new_id(f.u32(at + 0x10)?, at, out.len())?;
                out.push(c);
                if out.len() as u64 > size / 32 {
                    return Err(f.bad(at, "more contexts than the tree holds (a loop?)"));
                }
                todo.push((f.u64(at + 8)?, f.u64(at)?, out.len() - 1));
                at += 32 + 8 * u64::from(f.u8(at + 0x17)?);
            }
        }
        Ok(out)
    }

    /// Record a context's id; ids are unique and non-zero.
    fn new_id(&mut self, id: u32, at: u64, index: usize) -> Result<(), HpctoolkitError> {
        if id == 0 || self.ctx_ids.insert(id, index).is_some() {
            return Err(self
                .f
                .bad(at + 0x10, format!("context id {id} is 0 or repeated")));
        }
        Ok(())
    }

    /// The {Ctx} record at `at`, below context `parent`.
    fn context(&self, at: u64, parent: usize) -> Result<Context, HpctoolkitError> {
        let f = &self.f;
        let (flags, relation, lexical, words) = (
            f.u8(at + 0x14)?,
            f.u8(at + 0x15)?,
            f.u8(at + 0x16)?,
            f.u8(at + 0x17)?,
        );
        let relation = match relation {
            0 => Relation::Lexical,
            1 => Relation::Call,
            2 => Relation::InlinedCall,
            r => return Err(f.bad(at + 0x15, format!("unknown relation {r}"))),
        };
        let lexical = match lexical {
            0 => Lexical::Function,
            1 => Lexical::Loop,
            2 => Lexical::Line,
            3 => Lexical::Instruction,
            l => return Err(f.bad(at + 0x16, format!("unknown lexical type {l}"))),
        };
        // Flex sub-fields are packed at their alignment, in order, present or not.
        let mut cursor = at + 0x20;
        let mut next = |width: u64| {
            cursor = cursor.next_multiple_of(width) + width;
            cursor - width
        };
        let mut c = Context {
            parent: Some(parent),
            relation,
            lexical,
            function: None,
            src: None,
            point: None,
        };
        if flags & 1 != 0 {
            c.function = self.lookup(&self.functions, next(8), "function")?;
        }
        if flags & 2 != 0 {
            let file = self.lookup(&self.files, next(8), "source file")?;
            let line = f.u32(next(4))?;
            c.src = file.map(|file| (file, line));
        }
        if flags & 4 != 0 {
            let module = self.lookup(&self.modules, next(8), "load module")?;
            let offset = f.u64(next(8))?;
            c.point = module.map(|m| (m, offset));
        }
        if cursor > at + 0x20 + 8 * u64::from(words) {
            return Err(f.bad(at + 0x17, "flex fields larger than the context"));
        }
        Ok(c)
    }
}

/// Add the point values of every thread profile of `profile.db` to `ex`; returns the thread
/// of each profile index.
fn read_profiles(
    f: &In,
    meta: &MetaReader,
    ex: &mut Experiment,
) -> Result<FxHashMap<u32, usize>, HpctoolkitError> {
    let infos = f.header(b"prof", b"_prof.db", 2)?[0].1;
    let (array, n, stride) = (
        f.u64(infos)?,
        f.u32(infos + 8)?,
        u64::from(f.u8(infos + 0xc)?),
    );
    if stride < 0x2c {
        return Err(f.bad(infos + 0xc, "profile structures too small"));
    }
    let kind = |name: &str| meta.kinds.iter().position(|k| k == name);
    let (rank, thread) = (kind("RANK"), kind("THREAD"));
    let mut threads = FxHashMap::default();
    for k in 0..u64::from(n) {
        let at = array + k * stride;
        if f.u32(at + 0x28)? & 1 != 0 {
            continue; // a summary profile
        }
        let ids = identifiers(f, f.u64(at + 0x20)?)?;
        let id_of = |kind: Option<usize>| ids.iter().find(|i| Some(i.0) == kind).map_or(0, |i| i.1);
        ex.threads.push((id_of(rank), id_of(thread)));
        threads.insert(k as u32, ex.threads.len() - 1);
        block(
            f,
            at,
            meta,
            &ex.contexts,
            ex.threads.len() - 1,
            &mut ex.values,
        )?;
    }
    Ok(threads)
}

/// The (kind, logical id) pairs of the identifier tuple at `at` (none when 0).
fn identifiers(f: &In, at: u64) -> Result<Vec<(usize, u32)>, HpctoolkitError> {
    if at == 0 {
        return Ok(Vec::new());
    }
    (0..u64::from(f.u16(at)?))
        .map(|i| {
            let id = at + 8 + 16 * i;
            Ok((usize::from(f.u8(id)?), f.u32(id + 4)?))
        })
        .collect()
}

/// The point values of the profile-major value block at `at`, as thread `thread`.
fn block(
    f: &In,
    at: u64,
    meta: &MetaReader,
    contexts: &[Context],
    thread: usize,
    out: &mut Vec<PointValue>,
) -> Result<(), HpctoolkitError> {
    let mut inclusive = FxHashMap::default();
    let (n_values, values) = (f.u64(at)?, f.u64(at + 8)?);
    let (n_ctxs, indices) = (u64::from(f.u32(at + 0x10)?), f.u64(at + 0x18)?);
    f.slice(values, n_values.saturating_mul(10))?;
    f.slice(indices, n_ctxs.saturating_mul(12))?;
    for i in 0..n_ctxs {
        let (id, start) = (f.u32(indices + 12 * i)?, f.u64(indices + 12 * i + 4)?);
        let end = match i + 1 < n_ctxs {
            true => f.u64(indices + 12 * (i + 1) + 4)?,
            false => n_values,
        };
        if start > end || end > n_values {
            return Err(f.bad(indices + 12 * i, "value range out of order"));
        }
        // The global context (0), and contexts meta.db does not list, are in their parents.
        let Some(&ctx) = meta.ctx_ids.get(&id) else {
            continue;
        };
        for j in start..end {
            let (metric, value) = (f.u16(values + 10 * j)?, f.f64(values + 10 * j + 2)?);
            if let Some(&metric) = meta.inclusive_ids.get(&metric) {
                inclusive.insert((ctx, metric), value);
            }
        }
    }
    out.extend(exclusive_of_children(&inclusive, contexts, thread));
    Ok(())
}

/// Point values from inclusive ones: each context's less its listed children's.
fn exclusive_of_children(
    inclusive: &FxHashMap<(usize, usize), f64>,
    contexts: &[Context],
    thread: usize,
) -> Vec<PointValue> {
    let mut own = inclusive.clone();
    for (&(ctx, metric), &value) in inclusive {
        if let Some(parent) = contexts[ctx].parent {
            *own.entry((parent, metric)).or_default() -= value;
        }
    }
    let mut out: Vec<PointValue> = own
        .into_iter()
        .filter(|&(_, v)| v > 0.0)
        .map(|((ctx, metric), value)| PointValue {
            ctx,
            thread,
            metric,
            value,
        })
        .collect();
    out.sort_by_key(|p| (p.ctx, p.metric));
    out
}
