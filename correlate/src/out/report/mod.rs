//! `hpcview-rs --html`: a database as one self-contained HTML page, hpcviewer's tree tables
//! (top-down, callers, flat), a flame graph, a source pane and per-thread costs, and where the
//! database has them a data objects' table, a timeline and a memory map, for a laptop, a ticket or a CI
//! artefact, with no server and no network.
//!
//! The page is `report.html` with three things put in: the styles (`report.css`), the script
//! (`report.js`, plain hand-written JavaScript, no framework) and the data ([`payload`]) as JSON
//! in a `<script type="application/json">` element. The script renders lazily: only the rows of
//! expanded scopes are in the document, so a database of 100,000 scopes opens fast.

mod panes;
mod payload;

use std::io::{self, Write};

pub use payload::SourceLimits;

use crate::db::database::Database;
use crate::view::formula::Derived;

const PAGE: &str = include_str!("report.html");
const STYLE: &str = include_str!("report.css");
const SCRIPT: &str = include_str!("report.js");
const ASM_SCRIPT: &str = include_str!("asm.js");

/// What a report holds, for the tool's summary line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReportSummary {
    /// Scopes over the three views.
    pub scopes: usize,
    /// Source files named by the views, and how many of them have their text embedded.
    pub files: usize,
    /// Source files with their text embedded.
    pub embedded: usize,
    /// Data objects in the data objects' pane (none: no pane).
    pub objects: usize,
    /// Whether the timeline pane is there.
    pub timeline: bool,
    /// Whether the memory map pane is there.
    pub memmap: bool,
    /// Procedures whose machine code the report lists.
    pub listings: usize,
    /// Bytes written.
    pub bytes: usize,
}

/// Write the report of `db` (the metrics at `metrics`, in that order, and the `derived` ones,
/// read against the names of those) to `out`.
pub fn render(
    db: &Database,
    metrics: &[usize],
    derived: &[Derived],
    limits: SourceLimits,
    out: &mut dyn Write,
) -> io::Result<ReportSummary> {
    let data = payload::build(db, metrics, derived, limits);
    let mut views = String::new();
    for (i, v) in data.views.iter().enumerate() {
        views.push_str(&format!(
            "<script type=\"application/json\" id=\"view-{i}\">{}</script>\n",
            script_json(v)?
        ));
    }
    let page = fill(
        PAGE,
        &[
            ("/*STYLE*/", STYLE),
            ("{{DATA}}", &script_json(&data)?),
            ("{{VIEWS}}", &views),
            ("/*SCRIPT*/", SCRIPT),
            ("/*ASM*/", ASM_SCRIPT),
        ],
    )?;
    out.write_all(page.as_bytes())?;
    Ok(ReportSummary {
        scopes: data.views.iter().map(|v| v.nodes.len()).sum(),
        files: data.files.len(),
        embedded: data.files.iter().filter(|f| f.text.is_some()).count(),
        objects: data.objects.as_ref().map_or(0, Vec::len),
        timeline: data.timeline.is_some(),
        memmap: data.memmap.is_some(),
        listings: data.asm.len(),
        bytes: page.len(),
    })
}

/// `template` with each of `slots`' marks replaced by its text, in one pass from start to end:
/// the marks are looked for in the template only, never in what was put in, so data that holds
/// a mark's text (a source file quoting `{{VIEWS}}`) stays as it is. The marks are in the
/// template's order, each once.
fn fill(template: &str, slots: &[(&str, &str)]) -> io::Result<String> {
    let size = template.len() + slots.iter().map(|(_, text)| text.len()).sum::<usize>();
    let mut page = String::with_capacity(size);
    let mut rest = template;
    for (mark, text) in slots {
        let (before, after) = rest
            .split_once(mark)
            .ok_or_else(|| io::Error::other(format!("the report template lacks {mark}")))?;
        page.push_str(before);
        page.push_str(text);
        rest = after;
    }
    page.push_str(rest);
    Ok(page)
}

/// `value` as JSON to put inside a `<script>` element (see [`script_safe`]).
fn script_json(value: &impl serde::Serialize) -> io::Result<String> {
    let json = serde_json::to_string(value).map_err(io::Error::from)?;
    Ok(script_safe(&json))
}

/// JSON that cannot end the `<script>` element holding it: every `<` is written as the JSON
/// escape `\u003c`, which reads back as the same string.
fn script_safe(json: &str) -> String {
    json.replace('<', "\\u003c")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_json_cannot_close_its_script_element() {
        let json = serde_json::to_string("a</script><b>").unwrap();
        let safe = script_safe(&json);
        assert!(!safe.contains('<'));
        let back: String = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, "a</script><b>");
    }

    #[test]
    fn marks_are_filled_in_the_template_only() {
        let page = fill(
            "a {{X}} b {{Y}} c",
            &[("{{X}}", "{{Y}}"), ("{{Y}}", "{{X}}")],
        )
        .unwrap();
        assert_eq!(page, "a {{Y}} b {{X}} c");
        assert!(fill("no marks", &[("{{X}}", "x")]).is_err());
    }

    #[test]
    fn the_template_holds_each_mark_once_in_order() {
        let marks = [
            "/*STYLE*/",
            "{{DATA}}",
            "{{VIEWS}}",
            "/*SCRIPT*/",
            "/*ASM*/",
        ];
        let at: Vec<usize> = marks.iter().map(|m| PAGE.find(m).unwrap()).collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{at:?}");
        assert!(marks.iter().all(|m| PAGE.matches(m).count() == 1));
    }
}
