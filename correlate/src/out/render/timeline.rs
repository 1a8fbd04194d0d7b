//! The timeline ([`crate::Timeline`]) as text for the terminal, and as one drawing (rectangles
//! and labels) written as SVG or rasterised to PNG, so the two images show the same pixels.
//!
//! The drawing: one lane per thread (label on the left), each time column a rectangle in its
//! procedure's colour, a time axis below with ticks at round times, and a legend of the
//! procedures (colour, name, samples, share) under it: those with at least 1% of the samples
//! (at most twelve), the others in one grey and one line. The PNG ([`crate::out::render::raster`]) draws the
//! words with a system font when one is found.

use std::fmt::Write as _;
use std::io::{self, Write};

use crate::out::render::{printable, shortened, whole_if_cut};
use crate::view::time::Timeline;

/// Colours for the first procedures (most samples first): Tableau's ten, then eight more.
const PALETTE: [[u8; 3]; 18] = [
    [0x4e, 0x79, 0xa7],
    [0xf2, 0x8e, 0x2b],
    [0xe1, 0x57, 0x59],
    [0x76, 0xb7, 0xb2],
    [0x59, 0xa1, 0x4f],
    [0xed, 0xc9, 0x48],
    [0xb0, 0x7a, 0xa1],
    [0xff, 0x9d, 0xa7],
    [0x9c, 0x75, 0x5f],
    [0xba, 0xb0, 0xac],
    [0x1f, 0x3a, 0x93],
    [0x8c, 0x2d, 0x04],
    [0x00, 0x6d, 0x2c],
    [0x6a, 0x3d, 0x9a],
    [0xb1, 0x59, 0x28],
    [0x01, 0x66, 0x5e],
    [0x80, 0x80, 0x00],
    [0x40, 0x40, 0x40],
];

/// The colour of procedure `i` (its rank); past the palette, grey.
pub fn colour(i: usize) -> [u8; 3] {
    PALETTE.get(i).copied().unwrap_or([0xa0, 0xa0, 0xa0])
}

/// `#rrggbb`.
pub fn hex(c: [u8; 3]) -> String {
    format!("#{:02x}{:02x}{:02x}", c[0], c[1], c[2])
}

/// The letter standing for procedure `i` in the text rendering (`#` past 62).
fn letter(i: usize) -> char {
    const LETTERS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    LETTERS.get(i).map_or('#', |&b| b as char)
}

/// Write the text rendering: per lane one line of letters (`.` where the thread was not
/// running), a time axis, and the legend (letter, colour, samples, share, procedure).
pub fn render_text(t: &Timeline, out: &mut dyn Write) -> io::Result<()> {
    let label_w = t
        .lanes
        .iter()
        .map(|l| l.label.chars().count())
        .max()
        .unwrap_or(0);
    let columns = t.lanes.first().map_or(0, |l| l.cells.len());
    for lane in &t.lanes {
        let row: String = lane.cells.iter().map(|c| c.map_or('.', letter)).collect();
        writeln!(out, "{:>label_w$} |{row}|", printable(&lane.label))?;
    }
    let span = seconds(t.end_ns - t.start_ns);
    let right = format!("{span} s");
    let pad = (columns + 2).saturating_sub(right.len() + 3);
    writeln!(out, "{:>label_w$} 0 s{:pad$}{right}", "", "")?;
    let total: u64 = t.procedures.iter().map(|p| p.1).sum();
    for (i, (name, samples)) in t.procedures.iter().enumerate() {
        let share = 100.0 * *samples as f64 / total.max(1) as f64;
        let c = hex(colour(i));
        writeln!(
            out,
            "  {} {c} {samples:>8} {share:5.1}%  {}",
            letter(i),
            printable(name)
        )?;
    }
    Ok(())
}

/// Write the timeline as JSON: the time span (trace clock ns), the procedures (name, samples,
/// colour) and per lane the thread and each column's procedure index (`null`: not running).
pub fn render_json(t: &Timeline, db: &crate::Database, out: &mut dyn Write) -> io::Result<()> {
    let procedures: Vec<_> = t
        .procedures
        .iter()
        .enumerate()
        .map(|(i, (name, n))| serde_json::json!({"name": name, "samples": n, "colour": hex(colour(i))}))
        .collect();
    let lanes: Vec<_> = t
        .lanes
        .iter()
        .map(|l| {
            let thread = &db.threads[l.thread.index()];
            serde_json::json!({"pid": thread.pid, "tid": thread.tid, "comm": thread.comm,
                "samples": l.samples.len(), "cells": l.cells})
        })
        .collect();
    let doc = serde_json::json!({"start_ns": t.start_ns, "end_ns": t.end_ns,
        "column_ns": t.column_ns(), "procedures": procedures, "lanes": lanes});
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    writeln!(out)
}

/// Seconds with three decimals.
pub(crate) fn seconds(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e9)
}

/// One element of the drawing.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// A filled rectangle (pixels).
    Rect {
        /// Left edge.
        x: u32,
        /// Top edge.
        y: u32,
        /// Width.
        w: u32,
        /// Height.
        h: u32,
        /// Fill.
        rgb: [u8; 3],
    },
    /// A label; `x` is its start, or its middle when `centred`; `y` its baseline.
    Text {
        /// Horizontal position.
        x: u32,
        /// Baseline.
        y: u32,
        /// The words.
        text: String,
        /// Whether `x` is the middle.
        centred: bool,
        /// The whole text where `text` is shortened (the SVG shows it on hover).
        full: Option<String>,
    },
}

/// The drawing's layout: where the lanes are (tests read the PNG with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The left edge of the lanes (labels go left of it).
    pub left: u32,
    /// The top of the first lane.
    pub top: u32,
    /// One pixel column per timeline column.
    pub plot_width: u32,
    /// Height of one lane.
    pub lane_height: u32,
    /// Space between lanes.
    pub gap: u32,
}

/// The most pixels the lanes take together, gaps included, once they are more than 40: hundreds
/// of threads or ranks share them, down to two pixels a lane.
const LANES_HEIGHT: u32 = 1200;

/// The least distance between two lane labels' baselines (12-pixel type).
const LABEL_PITCH: u32 = 14;

impl Layout {
    /// The layout for a timeline of `lanes` threads computed with `columns` columns: a few
    /// threads get tall lanes (up to 60 pixels), up to 40 get 24 pixels each, more share 1200
    /// pixels (at least 2 each, the gap shrinking with them).
    pub fn new(columns: usize, lanes: usize) -> Layout {
        let n = lanes.max(1) as u32;
        let (lane_height, gap) = match n {
            ..=40 => ((240 / n).clamp(24, 60), 6),
            _ => {
                let pitch = (LANES_HEIGHT / n).max(2);
                let gap = match pitch {
                    12.. => 2,
                    4.. => 1,
                    _ => 0,
                };
                (pitch - gap, gap)
            }
        };
        Layout {
            left: 200,
            top: 20,
            plot_width: columns as u32,
            lane_height,
            gap,
        }
    }

    /// The distance from one lane's top to the next's.
    fn pitch(&self) -> u32 {
        self.lane_height + self.gap
    }

    /// The top of lane `i`.
    pub fn lane_top(&self, i: usize) -> u32 {
        self.top + i as u32 * (self.lane_height + self.gap)
    }
}

/// The drawing of `t` laid out by `layout`, and its size (width, height).
pub fn draw(t: &Timeline, layout: &Layout) -> (Vec<Shape>, (u32, u32)) {
    let mut shapes = Vec::new();
    let shown = shown_procedures(t);
    for (i, lane) in t.lanes.iter().enumerate() {
        let y = layout.lane_top(i);
        // Runs of equal cells as one rectangle each.
        let mut x = 0;
        while x < lane.cells.len() {
            let run = lane.cells[x..]
                .iter()
                .take_while(|&&c| c == lane.cells[x])
                .count();
            if let Some(p) = lane.cells[x] {
                let (x0, w, h) = (layout.left + x as u32, run as u32, layout.lane_height);
                shapes.push(Shape::Rect {
                    x: x0,
                    y,
                    w,
                    h,
                    rgb: if p < shown { colour(p) } else { OTHERS },
                });
            }
            x += run;
        }
    }
    lane_labels(t, layout, &mut shapes);
    let axis = layout.lane_top(t.lanes.len());
    let span = t.end_ns - t.start_ns;
    time_axis(&mut shapes, (layout.left, axis), layout.plot_width, span);
    let legend = axis + 36;
    let total: u64 = t.procedures.iter().map(|p| p.1).sum::<u64>().max(1);
    let rest = &t.procedures[shown..];
    let folded = (!rest.is_empty()).then(|| {
        let samples: u64 = rest.iter().map(|p| p.1).sum();
        let name = format!("{} more procedures, each under 1%", rest.len());
        (name, samples)
    });
    let entries = t.procedures[..shown].iter().chain(folded.as_ref());
    for (i, (name, samples)) in entries.enumerate() {
        let y = legend + i as u32 * 20;
        shapes.push(Shape::Rect {
            x: layout.left,
            y,
            w: 14,
            h: 14,
            rgb: if i < shown { colour(i) } else { OTHERS },
        });
        let share = 100.0 * *samples as f64 / total as f64;
        let name = printable(name);
        let text = format!(
            "{}  ({samples} samples, {share:.1}%)",
            shortened(&name, LEGEND_CHARS)
        );
        shapes.push(Shape::Text {
            x: layout.left + 22,
            y: y + 12,
            text,
            centred: false,
            full: whole_if_cut(&name, LEGEND_CHARS),
        });
    }
    let rows = shown + usize::from(folded.is_some());
    let height = legend + rows as u32 * 20 + 10;
    (shapes, (layout.left + layout.plot_width + 40, height))
}

/// The lanes' labels (`pid/tid comm`), each lane's where there is room; where lanes are too
/// thin for that, the first lane of each process (`pid comm: N threads`, a line above it
/// between processes), then the other lanes' wherever a label fits between those.
fn lane_labels(t: &Timeline, layout: &Layout, shapes: &mut Vec<Shape>) {
    // Inside a lane tall enough, else just below the lane's top.
    let baseline =
        |i: usize| layout.lane_top(i) + (layout.lane_height * 2 / 3).max(LABEL_PITCH - 4);
    let mut label = |i: usize, text: String| {
        shapes.push(Shape::Text {
            x: 8,
            y: baseline(i),
            text: printable(&text).into_owned(),
            centred: false,
            full: None,
        })
    };
    let lanes = &t.lanes;
    if layout.pitch() >= LABEL_PITCH {
        lanes
            .iter()
            .enumerate()
            .for_each(|(i, l)| label(i, l.label.clone()));
        return;
    }
    let starts: Vec<usize> = (0..lanes.len())
        .filter(|&i| i == 0 || lanes[i - 1].pid != lanes[i].pid)
        .collect();
    let mut taken: Vec<u32> = Vec::new();
    let mut lines = Vec::new();
    for &i in &starts {
        if i > 0 {
            lines.push(layout.lane_top(i) - layout.gap.min(1));
        }
        if taken.last().is_none_or(|&l| baseline(i) >= l + LABEL_PITCH) {
            let threads = lanes[i..]
                .iter()
                .take_while(|l| l.pid == lanes[i].pid)
                .count();
            let comm = lanes[i].label.split_once(' ').map_or("", |(_, c)| c);
            label(i, format!("{} {comm}: {threads} threads", lanes[i].pid));
            taken.push(baseline(i));
        }
    }
    for i in (0..lanes.len()).filter(|i| !starts.contains(i)) {
        if taken
            .iter()
            .all(|&l| l.abs_diff(baseline(i)) >= LABEL_PITCH)
        {
            label(i, lanes[i].label.clone());
            taken.push(baseline(i));
        }
    }
    for y in lines {
        shapes.push(Shape::Rect {
            x: 8,
            y,
            w: layout.left + layout.plot_width - 8,
            h: 1,
            rgb: PROCESS_LINE,
        });
    }
}

/// The colour of the line between two processes' lanes.
const PROCESS_LINE: [u8; 3] = [0x60, 0x60, 0x60];

/// How many procedures, the first ones (most samples first), get a colour and a legend line
/// of their own: those with at least 1% of the samples, at most twelve, at
/// least one. The others are drawn in one grey and summed in one line.
pub fn shown_procedures(t: &Timeline) -> usize {
    let total: u64 = t.procedures.iter().map(|p| p.1).sum();
    let big = (t.procedures.iter())
        .take_while(|p| p.1 as f64 >= 0.01 * total as f64)
        .count();
    big.clamp(1, LEGEND_PROCEDURES).min(t.procedures.len())
}

/// The most procedures drawn in colours of their own.
const LEGEND_PROCEDURES: usize = 12;

/// The colour of the procedures under 1% of the samples.
const OTHERS: [u8; 3] = [0xc8, 0xc8, 0xc8];

/// Characters of a procedure's name in the legend (C++ signatures run long).
const LEGEND_CHARS: usize = 80;

/// Draw a time axis of `width` pixels for `span` ns with its top left at `at`: a line, ticks
/// at round times and their labels (20 pixels below the line).
pub(crate) fn time_axis(shapes: &mut Vec<Shape>, at: (u32, u32), width: u32, span: u64) {
    let (left, y) = at;
    let black = [0, 0, 0];
    shapes.push(Shape::Rect {
        x: left,
        y,
        w: width,
        h: 1,
        rgb: black,
    });
    let span = span.max(1);
    let step = crate::view::time::round_step(span);
    for k in 0..=span / step {
        let x = left + ((k * step) as f64 / span as f64 * width as f64) as u32;
        shapes.push(Shape::Rect {
            x,
            y,
            w: 1,
            h: 6,
            rgb: black,
        });
        let text = format!(
            "{} s",
            seconds(k * step)
                .trim_end_matches('0')
                .trim_end_matches('.')
        );
        shapes.push(Shape::Text {
            x,
            y: y + 20,
            text,
            centred: true,
            full: None,
        });
    }
}

/// Write the drawing as an SVG document.
pub fn write_svg(shapes: &[Shape], size: (u32, u32), out: &mut dyn Write) -> io::Result<()> {
    let mut s = String::new();
    let (w, h) = size;
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    for shape in shapes {
        match shape {
            Shape::Rect { x, y, w, h, rgb } => {
                let fill = hex(*rgb);
                let _ = writeln!(
                    s,
                    r#"<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="{fill}"/>"#
                );
            }
            Shape::Text {
                x,
                y,
                text,
                centred,
                full,
            } => {
                let anchor = if *centred {
                    r#" text-anchor="middle""#
                } else {
                    ""
                };
                let text = xml_escape(text);
                // The whole text of a shortened label shows on hover.
                let title = (full.as_deref()).map_or(String::new(), |f| {
                    format!("<title>{}</title>", xml_escape(f))
                });
                let _ = writeln!(s, r#"<text x="{x}" y="{y}"{anchor}>{text}{title}</text>"#);
            }
        }
    }
    s.push_str("</svg>\n");
    out.write_all(s.as_bytes())
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::ids::ThreadIdx;
    use crate::view::time::Lane;

    /// Two procedures with most of the samples, eighteen with one each.
    fn timeline() -> Timeline {
        let mut procedures = vec![("hot".to_string(), 1000), ("warm".to_string(), 800)];
        procedures.extend((0..18).map(|i| (format!("cold{i}"), 1)));
        let cells = (0..20).map(Some).collect();
        Timeline {
            start_ns: 0,
            end_ns: 1_000_000,
            procedures,
            lanes: vec![Lane {
                thread: ThreadIdx::from_index(0),
                label: "1/1 app".into(),
                pid: 1,
                samples: Vec::new(),
                cells,
            }],
        }
    }

    /// `processes` processes of `threads` threads each, every lane in procedure 0.
    fn many_lanes(processes: u32, threads: u32) -> Timeline {
        let lanes = (0..processes * threads)
            .map(|k| Lane {
                thread: ThreadIdx::from_index(k as usize),
                label: format!("{}/{} rank", 100 + k / threads, 1000 + k),
                pid: 100 + k / threads,
                samples: Vec::new(),
                cells: vec![Some(0); 20],
            })
            .collect();
        Timeline {
            lanes,
            ..timeline()
        }
    }

    fn labels(shapes: &[Shape]) -> Vec<(u32, &str)> {
        (shapes.iter())
            .filter_map(|s| match s {
                Shape::Text { x: 8, y, text, .. } => Some((*y, text.as_str())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn hundreds_of_lanes_fit_in_a_screen_with_their_processes_named() {
        let t = many_lanes(4, 64);
        let layout = Layout::new(20, t.lanes.len());
        let (shapes, (_, height)) = draw(&t, &layout);
        assert_eq!((layout.lane_height, layout.gap), (3, 1));
        assert!(layout.lane_top(255) + 3 <= 20 + LANES_HEIGHT, "{layout:?}");
        assert!(height < 1400, "{height}");
        // Every lane drawn in its own band.
        let bands: Vec<u32> = (shapes.iter())
            .filter_map(|s| match s {
                Shape::Rect { y, h: 3, rgb, .. } if *rgb == colour(0) => Some(*y),
                _ => None,
            })
            .collect();
        assert_eq!(
            bands,
            (0..256).map(|i| layout.lane_top(i)).collect::<Vec<_>>()
        );
        // Each process named at its first lane, a line between processes, labels apart.
        let labels = labels(&shapes);
        for p in 0..4 {
            let first = layout.lane_top(64 * p as usize);
            let named = format!("{} rank: 64 threads", 100 + p);
            assert!(
                labels
                    .iter()
                    .any(|&(y, text)| text == named && y > first && y < first + 14),
                "{named}: {labels:?}"
            );
        }
        let mut ys: Vec<u32> = labels.iter().map(|l| l.0).collect();
        ys.sort_unstable();
        assert!(ys.windows(2).all(|w| w[1] - w[0] >= LABEL_PITCH), "{ys:?}");
        assert!(
            labels.len() > 8,
            "threads named between the processes: {labels:?}"
        );
        let lines = (shapes.iter())
            .filter(|s| matches!(s, Shape::Rect { rgb, .. } if *rgb == PROCESS_LINE))
            .count();
        assert_eq!(lines, 3);
    }

    #[test]
    fn a_long_name_is_cut_in_the_legend_and_whole_on_hover() {
        let long = format!("ns::Solver<{}>::step(double)", "T, ".repeat(40));
        let mut t = timeline();
        t.procedures[0].0 = long.clone();
        let (shapes, size) = draw(&t, &Layout::new(20, 1));
        let mut svg = Vec::new();
        write_svg(&shapes, size, &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        let line = svg.lines().find(|l| l.contains("ns::Solver")).unwrap();
        let (shown, title) = line.split_once("<title>").unwrap();
        assert!(shown.contains("…  (1000 samples, 55.0%)"), "{line}");
        assert_eq!(title, format!("{}</title></text>", xml_escape(&long)));
        let short = svg.lines().find(|l| l.contains(">warm")).unwrap();
        assert!(!short.contains("<title>"), "{short}");
    }

    #[test]
    fn up_to_forty_lanes_each_have_a_label() {
        for n in [1, 4, 20, 40] {
            let t = many_lanes(1, n);
            let layout = Layout::new(20, t.lanes.len());
            let (shapes, _) = draw(&t, &layout);
            assert!(layout.lane_height >= 24, "{n}: {layout:?}");
            assert_eq!(labels(&shapes).len(), n as usize, "{n}");
        }
    }

    #[test]
    fn procedures_under_one_percent_share_one_grey_and_one_legend_line() {
        let t = timeline();
        assert_eq!(shown_procedures(&t), 2);
        let (shapes, _) = draw(&t, &Layout::new(20, 1));
        let texts: Vec<&str> = (shapes.iter())
            .filter_map(|s| match s {
                Shape::Text { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert!(texts.contains(&"hot  (1000 samples, 55.0%)"), "{texts:?}");
        assert!(texts.contains(&"18 more procedures, each under 1%  (18 samples, 1.0%)"));
        assert!(!texts.iter().any(|t| t.starts_with("cold")));
        let greys = (shapes.iter())
            .filter(|s| matches!(s, Shape::Rect { rgb, h: 60, .. } if *rgb == OTHERS))
            .count();
        assert_eq!(greys, 18, "each cold cell grey, in a 60-pixel lane");
    }
}
