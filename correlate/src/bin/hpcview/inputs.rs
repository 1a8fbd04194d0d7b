//! What the command line names, checked against the database: the database file, threads,
//! metrics and percentages; and the short lists used in the error messages.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use correlate::{Database, Derived, Selection};

use crate::{bad, Failure};

pub(crate) fn check_percent(flag: &str, value: f64, zero_ok: bool) -> Result<(), Failure> {
    let low_ok = if zero_ok { value >= 0.0 } else { value > 0.0 };
    if low_ok && value <= 100.0 {
        Ok(())
    } else {
        Err(bad(anyhow!(
            "{flag} {value}: expected a percentage in (0, 100]"
        )))
    }
}

/// The database to open: the one given, or the only `*.hpcdb` file in the current directory.
pub(crate) fn database_path(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p.to_path_buf());
    }
    let mut found: Vec<PathBuf> = fs::read_dir(".")
        .context("listing the current directory")?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "hpcdb") && p.is_file())
        .collect();
    found.sort();
    match found.len() {
        0 => bail!("no *.hpcdb database in the current directory; name one (hpcprof-rs writes it)"),
        1 => {
            let p = found.remove(0);
            correlate::say_line!("hpcview-rs: opened {}", p.display());
            Ok(p)
        }
        _ => bail!(
            "several databases in the current directory ({}); name one",
            list(found.iter().map(|p| p.display().to_string()))
        ),
    }
}

/// The threads `--thread` selects (all when none is given).
pub(crate) fn thread_selection(
    db: &Database,
    tids: &[u32],
    path: &Path,
) -> anyhow::Result<Selection> {
    if tids.is_empty() {
        return Ok(Selection::All);
    }
    let mut chosen = Vec::new();
    for &tid in tids {
        let found = db.threads_with_tid(tid);
        if found.is_empty() {
            let known = db.threads.iter().map(|t| format!("{} ({})", t.tid, t.comm));
            bail!(
                "{}: no thread {tid}; threads: {}",
                path.display(),
                list(known)
            );
        }
        chosen.extend(found);
    }
    Ok(Selection::Threads(chosen))
}

/// What `--metric` asks for: the database's metrics to show (indices, in the order named; all
/// when none is named) and the derived metrics (`NAME = FORMULA`, or a built-in name such as
/// `ipc`), read against the database's metric names. A derived metric's inputs are shown too.
pub(crate) fn metric_choice(
    db: &Database,
    entries: &[String],
    path: &Path,
) -> anyhow::Result<(Vec<usize>, Vec<Derived>)> {
    let names: Vec<String> = db.metrics.iter().map(|m| m.name.clone()).collect();
    let mut shown = Vec::new();
    let mut derived = Vec::new();
    for entry in entries {
        if entry.contains('=') {
            let d = Derived::parse(entry, &names);
            derived.push(d.map_err(|e| anyhow!("{}: --metric {e}", path.display()))?);
        } else if let Some(i) = names.iter().position(|n| n == entry) {
            shown.push(i);
        } else if let Some(d) = Derived::built_in(entry, &names) {
            derived.push(d);
        } else if let Some(formula) = Derived::built_in_formula(entry) {
            bail!(
                "{}: '{entry}' is {formula}, and the database does not have all of these \
                 metrics (its metrics: {})",
                path.display(),
                list(names.iter().cloned())
            );
        } else {
            bail!(
                "{}: no metric '{entry}'; metrics: {} (or define one: --metric 'NAME = FORMULA')",
                path.display(),
                list(names.iter().cloned())
            );
        }
    }
    if shown.is_empty() {
        shown = (0..names.len()).collect();
    }
    for i in derived.iter().flat_map(Derived::inputs) {
        if !shown.contains(&i) {
            shown.push(i);
        }
    }
    Ok((shown, derived))
}

/// `derived` read against the metrics shown (`shown`: indices of `db`'s metrics, in the order
/// the view shows them), whose columns their formulas then name.
pub(crate) fn derived_over(
    db: &Database,
    shown: &[usize],
    derived: &[Derived],
) -> anyhow::Result<Vec<Derived>> {
    let names: Vec<String> = (shown.iter())
        .map(|&m| db.metrics[m].name.clone())
        .collect();
    let read = derived.iter().map(|d| d.against(&names));
    Ok(read.collect::<Result<Vec<_>, _>>()?)
}

/// At most ten items joined by `, `, then how many more.
pub(crate) fn list(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    let shown = items
        .iter()
        .take(10)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    match items.len() {
        0 => "none".to_string(),
        n if n > 10 => format!("{shown}, ... ({} more)", n - 10),
        _ => shown,
    }
}
