//! `--sort`, `--top`, `--focus` and `--hide`: shape a tree view before any output form prints it
//! (the work is the library's [`correlate::focus`] and friends).

use anyhow::anyhow;
use correlate::{SortKey, ViewTree};
use regex_lite::Regex;

use crate::{bad, Failure};

/// The shaping flags.
#[derive(Debug, clap::Args)]
pub(crate) struct ShapeArgs {
    /// Order siblings by COLUMN: `incl` or `excl` (first metric), `METRIC`, `METRIC:incl` or
    /// `METRIC:excl`, or `name` [default: incl]
    #[arg(long, value_name = "COLUMN")]
    pub(crate) sort: Option<String>,

    /// Keep at most N children of every scope (the first N in the sort order)
    #[arg(long, value_name = "N")]
    pub(crate) top: Option<usize>,

    /// Keep only the call paths through scopes whose label matches REGEX, costed by what passes
    /// through them (percentages stay of the whole program)
    #[arg(long, value_name = "REGEX")]
    pub(crate) focus: Option<String>,

    /// Drop the scopes whose label matches REGEX, with what is below them and their cost
    #[arg(long, value_name = "REGEX")]
    pub(crate) hide: Option<String>,
}

/// Apply the flags to `view`: focus, hide, sort, then top.
pub(crate) fn apply(args: &ShapeArgs, view: &mut ViewTree) -> Result<(), Failure> {
    if let Some(pattern) = &args.focus {
        *view = correlate::focus(view, &regex("--focus", pattern)?)
            .ok_or_else(|| bad(anyhow!("--focus {pattern}: no scope matches")))?;
    }
    if let Some(pattern) = &args.hide {
        *view = correlate::hide(view, &regex("--hide", pattern)?);
    }
    if let Some(column) = &args.sort {
        correlate::sort_by(view, &sort_key(view, column)?);
    }
    if let Some(n) = args.top {
        correlate::keep_top(view, n);
    }
    Ok(())
}

fn regex(flag: &str, pattern: &str) -> Result<Regex, Failure> {
    Regex::new(pattern).map_err(|e| {
        let why = e.to_string().lines().last().unwrap_or_default().to_string();
        bad(anyhow!(
            "{flag} {pattern}: not a regular expression ({why})"
        ))
    })
}

/// The column `spec` names among `view`'s metrics.
fn sort_key(view: &ViewTree, spec: &str) -> Result<SortKey, Failure> {
    let (metric, part) = match spec.rsplit_once(':') {
        Some((m, p)) => (m, p),
        None if matches!(spec, "incl" | "excl" | "name") => ("", spec),
        None => (spec, "incl"),
    };
    if part == "name" && metric.is_empty() {
        return Ok(SortKey::Name);
    }
    let exclusive = match part {
        "incl" => false,
        "excl" => true,
        _ => return Err(unknown_column(view, spec)),
    };
    let metric = match metric {
        "" => 0,
        name => view
            .metrics
            .iter()
            .position(|m| m.name == name)
            .ok_or_else(|| unknown_column(view, spec))?,
    };
    Ok(SortKey::Cost { metric, exclusive })
}

fn unknown_column(view: &ViewTree, spec: &str) -> Failure {
    let metrics: Vec<&str> = view.metrics.iter().map(|m| m.name.as_str()).collect();
    bad(anyhow!(
        "--sort {spec}: no such column (incl, excl, name, or METRIC[:incl|:excl] with METRIC one of {})",
        metrics.join(", ")
    ))
}
