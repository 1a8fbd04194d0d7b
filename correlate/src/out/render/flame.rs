//! The `--flamegraph` output: a flame graph drawn as one self-contained SVG file, with no other
//! tool needed (inferno and flamegraph.pl read `--folded` for the same picture).
//!
//! The frames are those of the folded stacks ([`super::folded`]): procedures, inlined code,
//! loops and the kernel, merged by path, each as wide as the samples of the first metric at and
//! below it. The root is at the bottom, children stand on their parent ordered by name (as
//! flamegraph.pl orders them), and each frame carries its full name and share as a tooltip.
//! Frames narrower than a fifth of a pixel are left out (their cost stays in their parent's
//! width), so a profile of a million paths stays a picture a browser opens at once.

use std::fmt::Write as _;
use std::io::{self, Write};

use super::folded::{FrameKind, PathTree};
use crate::view::tree::ViewTree;

/// Width of the picture (pixels).
const WIDTH: f64 = 1200.0;
/// Height of one frame (pixels).
const FRAME_HEIGHT: u32 = 16;
/// Room above the frames for the title, and below them for the total line.
const TOP: u32 = 40;
const BOTTOM: u32 = 24;
/// Side margins.
const MARGIN: f64 = 10.0;
/// Frames narrower than this (pixels) are not drawn.
const MIN_WIDTH: f64 = 0.2;
/// Average width of one character at the labels' 12-pixel font (pixels), to fit labels.
const CHAR_WIDTH: f64 = 7.0;

/// What [`render`] drew.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlameSummary {
    /// Frames drawn.
    pub frames: usize,
    /// Samples under the root (the picture's full width).
    pub samples: u64,
    /// Depth of the deepest frame drawn.
    pub depth: usize,
}

/// One frame to draw: its place and what it shows.
struct Placed {
    x: f64,
    width: f64,
    depth: usize,
    node: usize,
}

/// Draw `view`'s flame graph for metric `metric` as SVG, titled `title`.
pub fn render(
    view: &ViewTree,
    metric: usize,
    title: &str,
    out: &mut dyn Write,
) -> io::Result<FlameSummary> {
    let tree = PathTree::of(view, metric);
    let total = tree.inclusive();
    let samples = total[0];
    let scale = if samples == 0 {
        0.0
    } else {
        (WIDTH - 2.0 * MARGIN) / samples as f64
    };
    let placed = place(&tree, &total, scale);
    let depth = placed.iter().map(|p| p.depth).max().unwrap_or(0);
    let height = TOP + BOTTOM + FRAME_HEIGHT * (depth as u32 + 1);
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r##"<rect width="100%" height="100%" fill="#fdf6e8"/><text x="{}" y="24" text-anchor="middle" font-size="16">{}</text>"##,
        WIDTH / 2.0,
        escape(title)
    );
    for p in &placed {
        let y = height - BOTTOM - FRAME_HEIGHT * (p.depth as u32 + 1);
        frame_svg(&mut svg, &tree, &total, p, y, samples);
    }
    let _ = writeln!(
        svg,
        r#"<text x="{MARGIN}" y="{}">{samples} samples of {}; hover over a frame for its name and share</text>"#,
        height - 6,
        escape(
            view.metrics
                .get(metric)
                .map_or("no metric", |m| m.name.as_str())
        )
    );
    svg.push_str("</svg>\n");
    out.write_all(svg.as_bytes())?;
    Ok(FlameSummary {
        frames: placed.len(),
        samples,
        depth,
    })
}

/// Every frame wide enough to draw, with its place; children ordered by name.
fn place(tree: &PathTree, total: &[u64], scale: f64) -> Vec<Placed> {
    let mut placed = Vec::new();
    let mut stack = vec![(0usize, MARGIN, 0usize)];
    while let Some((node, x, depth)) = stack.pop() {
        let width = total[node] as f64 * scale;
        if width < MIN_WIDTH {
            continue;
        }
        placed.push(Placed {
            x,
            width,
            depth,
            node,
        });
        let mut children: Vec<usize> = tree.children(node).to_vec();
        children.sort_by(|&a, &b| tree.frame(a).cmp(tree.frame(b)));
        let mut left = x;
        for child in children {
            stack.push((child, left, depth + 1));
            left += total[child] as f64 * scale;
        }
    }
    placed
}

/// One frame's rectangle, tooltip and (where it fits) label.
fn frame_svg(svg: &mut String, tree: &PathTree, total: &[u64], p: &Placed, y: u32, all: u64) {
    let name = if p.node == 0 {
        "all"
    } else {
        tree.frame(p.node)
    };
    let kind = tree.kind(p.node);
    let share = 100.0 * total[p.node] as f64 / all.max(1) as f64;
    let fill = colour(name, kind);
    let _ = write!(
        svg,
        r#"<g><title>{} ({} samples, {share:.2}%)</title><rect x="{:.2}" y="{y}" width="{:.2}" height="{}" fill="{fill}" rx="2"/>"#,
        escape(name),
        total[p.node],
        p.x,
        p.width,
        FRAME_HEIGHT - 1
    );
    let fits = ((p.width - 6.0) / CHAR_WIDTH) as usize;
    if fits >= 3 {
        let label: String = if name.chars().count() <= fits {
            name.to_string()
        } else {
            let mut s: String = name.chars().take(fits - 2).collect();
            s.push_str("..");
            s
        };
        let _ = write!(
            svg,
            r#"<text x="{:.2}" y="{}">{}</text>"#,
            p.x + 3.0,
            y + FRAME_HEIGHT - 4,
            escape(&label)
        );
    }
    svg.push_str("</g>\n");
}

/// flamegraph.pl's palettes: warm colours for code, aqua for inlined code, orange for the
/// kernel, grey-blue for loops; the shade comes from the name, so a frame keeps its colour from
/// one picture to the next.
fn colour(name: &str, kind: FrameKind) -> String {
    let h = name
        .bytes()
        .fold(2166136261u32, |h, b| (h ^ b as u32).wrapping_mul(16777619));
    let v = |shift: u32, range: u32| (h >> shift) % range;
    let (r, g, b) = match kind {
        FrameKind::Inlined => (50 + v(0, 60), 180 + v(8, 55), 180 + v(16, 55)),
        FrameKind::Kernel => (220 + v(0, 35), 130 + v(8, 50), 40 + v(16, 30)),
        FrameKind::Loop => (150 + v(0, 40), 170 + v(8, 40), 200 + v(16, 40)),
        FrameKind::Code => (205 + v(0, 50), 80 + v(8, 150), 30 + v(16, 50)),
    };
    format!("rgb({r},{g},{b})")
}

/// `text` safe inside SVG text and attributes.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .chars()
        .filter(|c| !c.is_control())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::node::NodeKind;
    use crate::view::tree::{MetricInfo, ViewKind, ViewNode};
    use profiler::db::Cost;

    fn with_own(kind: NodeKind, name: &str, samples: u64) -> ViewNode {
        let mut n = ViewNode::new(kind, name, 1);
        n.own[0] = Cost {
            value: samples,
            samples,
        };
        n
    }

    /// A top-down view of `samples` cpu-clock samples holding only its root.
    fn empty(samples: u64) -> ViewTree {
        let metrics = vec![MetricInfo {
            name: "cpu-clock".into(),
            unit: "ns".into(),
            period: Some(1),
            total: samples,
            samples,
            read_with: None,
        }];
        let root = with_own(NodeKind::Root, "<program root>", 0);
        ViewTree::new(ViewKind::TopDown, metrics, root)
    }

    /// A view of 100 samples: main 10 own, main > a 60 (of which a > <kernel> 20), main > b 30.
    fn view() -> ViewTree {
        let mut view = empty(100);
        let main = view.push(0, with_own(NodeKind::Procedure, "main", 10));
        let a = view.push(main, with_own(NodeKind::Procedure, "a<&>", 40));
        view.push(a, with_own(NodeKind::Kernel, "<kernel>", 20));
        view.push(main, with_own(NodeKind::Inlined, "b", 30));
        view
    }

    /// The (x, width) of the rectangle after the tooltip naming `name`.
    fn rect_of(svg: &str, name: &str) -> (f64, f64) {
        let at = svg.find(&format!("<title>{name} (")).expect(name);
        let rect = &svg[at..];
        let attr = |key: &str| -> f64 {
            let start = rect.find(&format!(" {key}=\"")).unwrap() + key.len() + 3;
            rect[start..].split('"').next().unwrap().parse().unwrap()
        };
        (attr("x"), attr("width"))
    }

    #[test]
    fn frames_are_as_wide_as_their_samples_and_stand_on_their_parent() {
        let mut out = Vec::new();
        let summary = render(&view(), 0, "t", &mut out).unwrap();
        let svg = String::from_utf8(out).unwrap();
        assert_eq!(
            (summary.samples, summary.frames, summary.depth),
            (100, 5, 3)
        );
        let full = WIDTH - 2.0 * MARGIN;
        let (_, all) = rect_of(&svg, "all");
        let (main_x, main) = rect_of(&svg, "main");
        let (a_x, a) = rect_of(&svg, "a&lt;&amp;&gt;");
        let (b_x, b) = rect_of(&svg, "b_[i]");
        let (k_x, k) = rect_of(&svg, "&lt;kernel&gt;_[k]");
        assert!((all - full).abs() < 0.01 && (main - full).abs() < 0.01);
        assert!((a - 0.6 * full).abs() < 0.01 && (b - 0.3 * full).abs() < 0.01);
        assert!((k - 0.2 * full).abs() < 0.01);
        // Children by name from their parent's left edge: a, then b; the kernel on a.
        assert_eq!((a_x, k_x), (main_x, main_x));
        assert!((b_x - (main_x + a)).abs() < 0.01);
        assert!(svg.contains("(60 samples, 60.00%)"), "{svg}");
    }

    #[test]
    fn an_empty_view_is_a_picture_without_frames() {
        let mut out = Vec::new();
        let summary = render(&empty(0), 0, "t", &mut out).unwrap();
        assert_eq!(summary.samples, 0);
        assert!(String::from_utf8(out).unwrap().ends_with("</svg>\n"));
    }
}
