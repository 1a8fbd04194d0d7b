//! HPCToolkit's metric taxonomy, `metrics/default.yaml` (the METRICS.yaml format that hpcviewer
//! reads to present a database's metrics): every metric of `meta.db` as a root with its values
//! summed over the threads, inclusive and exclusive, and every derived metric as a root whose
//! formula hpcviewer evaluates over those sums per context.

use std::fmt::Write as _;

use crate::db::database::MetricDesc;
use crate::view::formula::Derived;

/// The taxonomy of a database whose `meta.db` metrics are `names` (two per metric of `metrics`,
/// its values then its sample counts, as `export` names them), with the `derived` metrics
/// (read against the names of `metrics`) after them.
pub(crate) fn default_yaml(
    metrics: &[MetricDesc],
    names: &[String],
    derived: &[Derived],
) -> String {
    let mut out = String::from(
        "%YAML 1.2\n---\n# Written by hpcprof-rs (hpctoolkit-rs): the metrics of meta.db, then the\n\
         # derived ones (hpcprof-rs --metric 'NAME = FORMULA').\nversion: 0\ninputs:\n",
    );
    for (k, name) in names.iter().enumerate() {
        for (suffix, scope) in [("I", "execution"), ("E", "function")] {
            let _ = writeln!(
                out,
                "  - &m{k}-{suffix}\n    metric: {}\n    scope: {scope}\n    formula: $$\n    \
                 combine: sum",
                quoted(name)
            );
        }
    }
    out.push_str("roots:\n");
    for (k, name) in names.iter().enumerate() {
        root(
            &mut out,
            name,
            name,
            "[number, percent]",
            &format!("*m{k}-I"),
            &format!("*m{k}-E"),
        );
    }
    for d in derived {
        // The formula reads metric `i` in our units: its values are meta.db's metric `2 i`,
        // and a clock's are written in seconds there, ours in nanoseconds.
        let input = |suffix: &'static str| {
            move |i: usize| {
                let alias = format!("*m{}-{suffix}", 2 * i);
                match metrics.get(i).is_some_and(|m| m.unit == "ns") {
                    true => format!("[{alias}, '*', 1000000000]"),
                    false => alias,
                }
            }
        };
        let description = format!("{} = {} (derived by hpctoolkit-rs)", d.name, d.formula);
        let inclusive = d.taxonomy_formula(&input("I"));
        let exclusive = d.taxonomy_formula(&input("E"));
        root(
            &mut out,
            &d.name,
            &description,
            "number",
            &inclusive,
            &exclusive,
        );
    }
    out
}

/// Append a root metric `name` whose one variant, `Sum`, renders as `render` with these
/// formulas.
fn root(out: &mut String, name: &str, description: &str, render: &str, incl: &str, excl: &str) {
    let _ = writeln!(
        out,
        "  - name: {}\n    description: {}\n    variants:\n      Sum:\n        render: {render}\n        \
         formula:\n          inclusive: {incl}\n          exclusive: {excl}",
        quoted(name),
        quoted(description)
    );
}

/// `s` as a single-quoted YAML scalar (any text, a quote doubled).
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use profiler::db::Sampling;

    #[test]
    fn a_derived_metric_reads_clocks_in_nanoseconds() {
        let metrics = vec![
            MetricDesc::new("cpu-clock", "ns", Sampling::Frequency(1000)),
            MetricDesc::new("page-faults", "events", Sampling::Period(1)),
        ];
        let names: Vec<String> = ["CPUTIME (sec)", "cpu-clock samples", "page-faults", "p"]
            .map(String::from)
            .to_vec();
        let ours = ["cpu-clock".to_string(), "page-faults".to_string()];
        let d = Derived::parse("r = page-faults / -(cpu-clock / 1e6)", &ours).unwrap();
        let yaml = default_yaml(&metrics, &names, &[d]);
        assert!(yaml.contains("  - &m0-I\n    metric: 'CPUTIME (sec)'\n    scope: execution"));
        assert!(yaml.contains(
            "inclusive: [*m2-I, '/', [-1, '*', [[*m0-I, '*', 1000000000], '/', 1000000]]]"
        ));
        assert!(yaml.contains("exclusive: [*m2-E, '/',"));
        assert!(yaml.contains("description: 'r = page-faults / -(cpu-clock / 1e6) (derived"));
        assert_eq!(quoted("it's"), "'it''s'");
    }
}
