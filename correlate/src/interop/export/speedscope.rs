//! A database as a speedscope file (speedscope's JSON file format, `$schema`
//! `https://www.speedscope.app/file-format-schema.json`), for the offline flame-graph viewer.
//!
//! One `sampled` profile per measured thread and metric (named `METRIC: thread TID (COMM)`),
//! sharing one frame table. Each distinct stack that carries samples is one entry of
//! `samples` (frame indices, outermost first) with its cost as weight, in the metric's unit:
//! `nanoseconds` for clocks, `none` (event counts) otherwise; `startValue` is 0 and `endValue`
//! the profile's total. Frames are the view's scopes by their labels, with their source file
//! and begin line: procedures, `[I] name` inlined code, `loop at file: line` loops and the
//! placeholders (`<partial call paths>`, ...); a frame is the same frame wherever it occurs.

use std::collections::HashMap;
use std::io::{self, Write};

use serde::Serialize;

use crate::db::database::Database;
use crate::interop::export::{stacks, thread_views};
use crate::view::tree::{ViewNode, ViewTree};

/// The file's `$schema`, which is how speedscope recognises its own format.
const SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

#[derive(Serialize)]
struct File<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    shared: Shared,
    profiles: Vec<SampledProfile>,
    name: &'a str,
    #[serde(rename = "activeProfileIndex")]
    active_profile_index: usize,
    exporter: String,
}

#[derive(Serialize)]
struct Shared {
    frames: Vec<Frame>,
}

/// A frame of the shared table.
#[derive(Serialize, Clone, PartialEq, Eq, Hash)]
struct Frame {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u32>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SampledProfile {
    #[serde(rename = "type")]
    kind: &'static str,
    name: String,
    unit: &'static str,
    start_value: u64,
    end_value: u64,
    samples: Vec<Vec<usize>>,
    weights: Vec<u64>,
}

/// What [`render`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpeedscopeSummary {
    /// Profiles (threads x metrics).
    pub profiles: usize,
    /// Distinct frames.
    pub frames: usize,
}

/// The frame table: each distinct (label, file, line) once, in order of first use.
#[derive(Default)]
struct Frames {
    list: Vec<Frame>,
    index: HashMap<Frame, usize>,
}

impl Frames {
    fn of(&mut self, node: &ViewNode) -> usize {
        let frame = Frame {
            name: node.label(),
            file: node.file.clone(),
            line: node.line,
        };
        let next = self.list.len();
        *self.index.entry(frame).or_insert_with_key(|f| {
            self.list.push(f.clone());
            next
        })
    }
}

/// The unit speedscope shows a metric's values in.
fn unit(metric_unit: &str) -> &'static str {
    match metric_unit {
        "ns" => "nanoseconds",
        _ => "none",
    }
}

/// The sampled profiles of one thread's view, one per metric.
fn profiles_of(view: &ViewTree, thread: &str, frames: &mut Frames) -> Vec<SampledProfile> {
    let found = stacks(view);
    let indices: Vec<Vec<usize>> = found
        .iter()
        .map(|s| {
            s.frames
                .iter()
                .map(|&f| frames.of(&view.nodes[f]))
                .collect()
        })
        .collect();
    view.metrics
        .iter()
        .enumerate()
        .map(|(m, metric)| {
            let weighed = found
                .iter()
                .zip(&indices)
                .filter(|(s, _)| s.own[m].value > 0);
            let (weights, samples): (Vec<u64>, Vec<Vec<usize>>) =
                weighed.map(|(s, i)| (s.own[m].value, i.clone())).unzip();
            SampledProfile {
                kind: "sampled",
                name: format!("{}: {thread}", metric.name),
                unit: unit(&metric.unit),
                start_value: 0,
                end_value: weights.iter().sum(),
                samples,
                weights,
            }
        })
        .collect()
}

/// Write `db` as a speedscope file named `name` (shown by speedscope as the profile group's
/// name): every thread, every metric.
pub fn render(db: &Database, name: &str, out: &mut dyn Write) -> io::Result<SpeedscopeSummary> {
    let mut frames = Frames::default();
    let mut profiles = Vec::new();
    for (thread, view) in thread_views(db) {
        let who = format!("thread {} ({})", thread.tid, thread.comm);
        profiles.extend(profiles_of(&view, &who, &mut frames));
    }
    let summary = SpeedscopeSummary {
        profiles: profiles.len(),
        frames: frames.list.len(),
    };
    let file = File {
        schema: SCHEMA,
        shared: Shared {
            frames: frames.list,
        },
        profiles,
        name,
        active_profile_index: 0,
        exporter: format!("hpcview-rs@{}", env!("CARGO_PKG_VERSION")),
    };
    serde_json::to_writer(&mut *out, &file)?;
    writeln!(out)?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interop::export::tests::sample_view;

    #[test]
    fn stacks_become_samples_over_one_frame_table() {
        let view = sample_view();
        let mut frames = Frames::default();
        let profiles = profiles_of(&view, "thread 7 (app)", &mut frames);
        assert_eq!(profiles.len(), 1);
        let p = &profiles[0];
        assert_eq!(
            (p.name.as_str(), p.unit),
            ("cpu-clock: thread 7 (app)", "nanoseconds")
        );
        assert_eq!(p.samples, [vec![0, 1], vec![0, 1, 2], vec![0, 3]]);
        assert_eq!(p.weights, [10, 30, 20]);
        assert_eq!(p.end_value, 60);
        let names: Vec<&str> = frames.list.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["main", "loop at m.cc: 19", "[I] Mp::add", "leaf"]);
        assert_eq!(frames.list[2].file.as_deref(), Some("/s/m.h"));
        assert_eq!(frames.list[2].line, Some(3));
        // A second thread reuses the frames.
        profiles_of(&view, "thread 8 (app)", &mut frames);
        assert_eq!(frames.list.len(), 4);
    }
}
