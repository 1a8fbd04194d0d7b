//! A database as a pprof profile: pprof's `profile.proto` (`pprof_proto`),
//! gzipped, which `go tool pprof` and the continuous-profiling backends read.
//!
//! - **Sample types**: one per metric, `(name, nanoseconds)` for clocks and `(name, count)`
//!   otherwise, values in event units; the first is the default and the period type.
//! - **Samples**: one per distinct stack with samples, per thread; labelled `thread_id` (a
//!   number) and `thread_name`, so `-tagfocus` picks threads.
//! - **Locations**: one per physical frame (a procedure activation, an unknown procedure, the
//!   kernel, a placeholder) with its `Line` list innermost first: the sampled line in the
//!   innermost scope, then each enclosing inlined frame or loop at the line where it holds the
//!   inner one (an inlined call's call site), the procedure last. Loops are functions named
//!   `loop at file: line`, inlined code by its plain name (pprof marks it `(inline)` by its
//!   place), the rest by the views' labels; `system_name` is
//!   the plain name, except for names in angle brackets (`<kernel>`, Python's `<module>`),
//!   which pprof's demangler would erase. The enriched tree keeps no addresses, so `address` is 0.
//! - **Mappings**: one per module, its path and GNU build-id (hex).
//! - `duration_nanos` is the wall-clock time measured; the command line is a comment.

use std::collections::HashMap;
use std::io::{self, Write};

use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;

use crate::db::database::Database;
use crate::db::node::NodeKind;
use crate::interop::export::pprof_proto::{
    Function, Label, Line, Location, Mapping, Profile, Sample, ValueType,
};
use crate::interop::export::{stacks, thread_views, Stack};
use crate::view::tree::{MetricInfo, ViewNode, ViewTree};

/// What [`render`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PprofSummary {
    /// Samples (distinct stacks per thread).
    pub samples: usize,
    /// Locations (distinct physical frames).
    pub locations: usize,
    /// Functions (distinct procedures, inlined functions and loops).
    pub functions: usize,
}

/// Write `db` as a gzipped pprof profile: every thread, every metric.
pub fn render(db: &Database, out: &mut dyn Write) -> io::Result<PprofSummary> {
    let mut builder = Builder::new(db);
    for (thread, view) in thread_views(db) {
        let labels = [
            builder.label_num("thread_id", thread.tid.into()),
            builder.label_str("thread_name", &thread.comm),
        ];
        for stack in stacks(&view) {
            builder.add_sample(&view, &stack, &labels);
        }
    }
    let profile = builder.finish();
    let summary = PprofSummary {
        samples: profile.sample.len(),
        locations: profile.location.len(),
        functions: profile.function.len(),
    };
    let mut gz = GzEncoder::new(out, Compression::default());
    gz.write_all(&profile.encode_to_vec())?;
    gz.finish()?;
    Ok(summary)
}

/// The profile being built, with the tables that make each string, function, location and
/// mapping appear once.
struct Builder<'a> {
    db: &'a Database,
    profile: Profile,
    strings: HashMap<String, i64>,
    functions: HashMap<(i64, i64, i64, i64), u64>,
    locations: HashMap<(u64, Vec<Line>), u64>,
    mappings: HashMap<String, u64>,
}

impl<'a> Builder<'a> {
    fn new(db: &'a Database) -> Builder<'a> {
        let mut b = Builder {
            db,
            profile: Profile::default(),
            strings: HashMap::new(),
            functions: HashMap::new(),
            locations: HashMap::new(),
            mappings: HashMap::new(),
        };
        b.string("");
        let types: Vec<ValueType> = db
            .metrics
            .iter()
            .map(|m| ValueType {
                r#type: b.string(&m.name),
                unit: b.string(if m.unit == "ns" {
                    "nanoseconds"
                } else {
                    "count"
                }),
            })
            .collect();
        b.profile.default_sample_type = types.first().map_or(0, |t| t.r#type);
        b.profile.period_type = types.first().cloned();
        b.profile.sample_type = types;
        b.profile.period = db.metrics.first().map_or(0, |m| {
            let period = MetricInfo::of(m, m.total).period.unwrap_or(0);
            i64::try_from(period).unwrap_or(i64::MAX)
        });
        b.profile.duration_nanos = i64::try_from(db.data.elapsed_ns).unwrap_or(i64::MAX);
        if !db.command.is_empty() {
            let command = b.string(&db.command.join(" "));
            b.profile.comment.push(command);
        }
        b
    }

    fn finish(self) -> Profile {
        self.profile
    }

    /// The string-table index of `s`.
    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.profile.string_table.len() as i64;
        self.profile.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn label_num(&mut self, key: &str, num: i64) -> Label {
        Label {
            key: self.string(key),
            str: 0,
            num,
        }
    }

    fn label_str(&mut self, key: &str, value: &str) -> Label {
        Label {
            key: self.string(key),
            str: self.string(value),
            num: 0,
        }
    }

    /// The id of the function a frame's scope stands for.
    fn function(&mut self, node: &ViewNode) -> u64 {
        // Inlined code is marked by its place in a location's lines (pprof prints `(inline)`),
        // so it carries its plain name, not the views' `[I]` label.
        let label = match node.kind {
            NodeKind::Inlined => node.name.clone(),
            _ => node.label(),
        };
        // pprof takes a function whose name is its system name as not yet demangled, and its
        // demangler turns `<kernel>`, `<module>` or `<unknown procedure> ...` into nothing
        // (template arguments left out), shown as `<unknown>`, and `f(int)@plt` into `f`, the
        // name of another function: such names have no system name.
        let pseudo = node.name.starts_with('<') || node.name.ends_with("@plt");
        let system = match label == node.name && pseudo {
            true => "",
            false => node.name.as_str(),
        };
        let key = (
            self.string(&label),
            self.string(system),
            self.string(node.file.as_deref().unwrap_or("")),
            node.line.map_or(0, i64::from),
        );
        let next = self.profile.function.len() as u64 + 1;
        let id = *self.functions.entry(key).or_insert(next);
        if id == next {
            let (name, system_name, filename, start_line) = key;
            self.profile.function.push(Function {
                id,
                name,
                system_name,
                filename,
                start_line,
            });
        }
        id
    }

    /// The id of the mapping of module `path` (0 for none).
    fn mapping(&mut self, path: Option<&str>) -> u64 {
        let Some(path) = path else { return 0 };
        if let Some(&id) = self.mappings.get(path) {
            return id;
        }
        let build_id = self
            .db
            .modules
            .iter()
            .find(|m| m.path == path)
            .and_then(|m| m.build_id.as_deref())
            .map_or(String::new(), profiler::debugfiles::hex);
        let id = self.profile.mapping.len() as u64 + 1;
        let mapping = Mapping {
            id,
            filename: self.string(path),
            build_id: self.string(&build_id),
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            has_inline_frames: true,
            ..Mapping::default()
        };
        self.profile.mapping.push(mapping);
        self.mappings.insert(path.to_string(), id);
        id
    }

    /// The id of the location of one physical frame: `scopes` (view nodes, outermost first)
    /// with control at line `at` in the innermost.
    fn location(&mut self, view: &ViewTree, scopes: &[usize], at: Option<u32>) -> u64 {
        let mut lines = Vec::with_capacity(scopes.len());
        let mut pos = at;
        for &s in scopes.iter().rev() {
            let node = &view.nodes[s];
            let line = pos.or(node.line);
            lines.push(Line {
                function_id: self.function(node),
                line: line.map_or(0, i64::from),
            });
            if node.kind == NodeKind::Inlined {
                pos = node.call_line;
            } else {
                pos = line;
            }
        }
        let module = scopes.iter().find_map(|&s| view.nodes[s].module.as_deref());
        let mapping_id = self.mapping(module);
        let next = self.profile.location.len() as u64 + 1;
        let id = *self
            .locations
            .entry((mapping_id, lines.clone()))
            .or_insert(next);
        if id == next {
            self.profile.location.push(Location {
                id,
                mapping_id,
                address: 0,
                line: lines,
            });
        }
        id
    }

    /// Add `stack` of `view` as a sample labelled `labels`.
    fn add_sample(&mut self, view: &ViewTree, stack: &Stack, labels: &[Label]) {
        let frames = activations(view, &stack.frames);
        let mut location_id = Vec::with_capacity(frames.len());
        for (i, scopes) in frames.iter().enumerate().rev() {
            let at = match frames.get(i + 1) {
                Some(inner) => view.nodes[inner[0]].call_line,
                None => stack.line,
            };
            location_id.push(self.location(view, scopes, at));
        }
        let value = stack
            .own
            .iter()
            .map(|c| i64::try_from(c.value).unwrap_or(i64::MAX))
            .collect();
        self.profile.sample.push(Sample {
            location_id,
            value,
            label: labels.to_vec(),
        });
    }
}

/// `frames` (outermost first) cut into physical frames: each starts at a frame that is not
/// inlined code or a loop, and holds the inlined frames and loops inside it.
fn activations<'f>(view: &ViewTree, frames: &'f [usize]) -> Vec<&'f [usize]> {
    let starts_one = |&f: &usize| !matches!(view.nodes[f].kind, NodeKind::Inlined | NodeKind::Loop);
    let mut cuts: Vec<usize> = (0..frames.len())
        .filter(|&i| i == 0 || starts_one(&frames[i]))
        .collect();
    cuts.push(frames.len());
    cuts.windows(2).map(|w| &frames[w[0]..w[1]]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::database::MetricDesc;
    use crate::interop::export::tests::sample_view;
    use profiler::db::Sampling;

    /// The function names and lines of location `id`, innermost first.
    fn lines(p: &Profile, id: u64) -> Vec<(String, i64)> {
        let loc = &p.location[id as usize - 1];
        loc.line
            .iter()
            .map(|l| {
                let f = &p.function[l.function_id as usize - 1];
                (p.string_table[f.name as usize].clone(), l.line)
            })
            .collect()
    }

    #[test]
    fn physical_frames_hold_their_inlined_frames_and_loops_innermost_first() {
        let metric = MetricDesc::new("cpu-clock", "ns", Sampling::Frequency(1000));
        let db = Database::new(vec![metric]);
        let view = sample_view();
        let mut b = Builder::new(&db);
        let label = b.label_num("thread_id", 7);
        for stack in stacks(&view) {
            b.add_sample(&view, &stack, std::slice::from_ref(&label));
        }
        let p = b.finish();
        assert_eq!(p.period, 1_000_000);
        let named = |i: usize| p.string_table[i].as_str();
        assert_eq!(named(p.sample_type[0].unit as usize), "nanoseconds");
        let chains: Vec<Vec<Vec<(String, i64)>>> = p
            .sample
            .iter()
            .map(|s| s.location_id.iter().map(|&l| lines(&p, l)).collect())
            .collect();
        let l = |v: &[(&str, i64)]| {
            v.iter()
                .map(|(n, l)| (n.to_string(), *l))
                .collect::<Vec<_>>()
        };
        assert_eq!(chains[0], [l(&[("loop at m.cc: 19", 19), ("main", 19)])]);
        assert_eq!(
            chains[1],
            [l(&[("Mp::add", 4), ("loop at m.cc: 19", 20), ("main", 20)])]
        );
        assert_eq!(chains[2], [l(&[("leaf", 2)]), l(&[("main", 25)])]);
        assert_eq!(
            p.sample.iter().map(|s| s.value[0]).collect::<Vec<_>>(),
            [10, 30, 20]
        );
        let add = &p.function[p.location[1].line[0].function_id as usize - 1];
        assert_eq!(
            (
                named(add.system_name as usize),
                named(add.filename as usize)
            ),
            ("Mp::add", "/s/m.h")
        );
        assert_eq!(add.start_line, 3);
        assert_eq!(p.mapping.len(), 1);
        assert!(p.location.iter().all(|l| l.mapping_id == 1));
    }
}
