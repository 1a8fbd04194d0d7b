//! Derived metrics: `NAME = FORMULA` over the view's metrics (`hpcview-rs --metric 'ipc =
//! instructions / cycles'`), evaluated per scope on its inclusive and exclusive costs.
//!
//! A formula has numbers (`1e9`, `0.5`), metric names, `+ - * /`, unary minus and parentheses,
//! with the usual precedence. A metric name may hold `-` (`page-faults`): a run of name
//! characters is read as the longest metric name it starts with, the rest as what follows
//! (`cycles-instructions` is `cycles - instructions` where no metric has the whole name).
//! Values are the metrics' costs in their units (ns for clocks, events otherwise); a division
//! by zero, or any result that is not a finite number, has no value (shown empty), never a wrong
//! one.

use thiserror::Error;

use profiler::db::Cost;

/// Why a definition could not be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FormulaError {
    /// The text is not `NAME = FORMULA`.
    #[error(
        "'{0}': a derived metric is written NAME = FORMULA (e.g. 'ipc = instructions / cycles')"
    )]
    NotADefinition(String),
    /// A name in the formula is no metric of the view.
    #[error("'{name}' in '{formula}' is no metric of the database (its metrics: {known})")]
    UnknownMetric {
        /// The name.
        name: String,
        /// The formula.
        formula: String,
        /// The database's metric names, listed.
        known: String,
    },
    /// The formula does not parse.
    #[error("'{formula}': {why}")]
    Syntax {
        /// The formula.
        formula: String,
        /// What is wrong, and where.
        why: String,
    },
}

/// A formula over metrics, by their position in the list it was read against.
#[derive(Debug, Clone, PartialEq)]
enum Expr {
    Number(f64),
    Metric(usize),
    Negate(Box<Expr>),
    Binary(char, Box<Expr>, Box<Expr>),
}

/// One derived metric: its name, its formula as written, and the formula read.
#[derive(Debug, Clone, PartialEq)]
pub struct Derived {
    /// The name given before `=`.
    pub name: String,
    /// The formula as written after `=`.
    pub formula: String,
    expr: Expr,
}

/// Derived metrics offered by name when their inputs are there (perf's and HPCToolkit's usual
/// ratios).
const BUILT_IN: &[(&str, &str)] = &[
    ("ipc", "instructions / cycles"),
    ("cpi", "cycles / instructions"),
    ("cache-miss-ratio", "cache-misses / cache-references"),
    ("branch-miss-ratio", "branch-misses / branches"),
];

impl Derived {
    /// Read `NAME = FORMULA` against the metric names `metrics`.
    pub fn parse(text: &str, metrics: &[String]) -> Result<Derived, FormulaError> {
        let (name, formula) = text
            .split_once('=')
            .map(|(n, f)| (n.trim(), f.trim()))
            .filter(|(n, f)| !n.is_empty() && !f.is_empty())
            .ok_or_else(|| FormulaError::NotADefinition(text.to_string()))?;
        let mut parser = Parser {
            text: formula,
            at: 0,
            metrics,
        };
        let expr = parser.sum()?;
        parser.skip_spaces();
        if parser.at < formula.len() {
            return Err(parser.error("unexpected text"));
        }
        Ok(Derived {
            name: name.to_string(),
            formula: formula.to_string(),
            expr,
        })
    }

    /// The built-in derived metric `name` (`ipc`, `cpi`, ...), where each of its inputs is among
    /// `metrics`.
    pub fn built_in(name: &str, metrics: &[String]) -> Option<Derived> {
        let (_, formula) = BUILT_IN.iter().find(|(n, _)| *n == name)?;
        Derived::parse(&format!("{name} = {formula}"), metrics).ok()
    }

    /// Every built-in derived metric whose inputs are among `metrics`.
    pub fn built_ins(metrics: &[String]) -> Vec<Derived> {
        (BUILT_IN.iter())
            .filter_map(|(name, _)| Derived::built_in(name, metrics))
            .collect()
    }

    /// The formula of the built-in derived metric `name`, whatever the database measured.
    pub fn built_in_formula(name: &str) -> Option<&'static str> {
        BUILT_IN.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
    }

    /// The positions (in the list the formula was read against) of the metrics it uses.
    pub fn inputs(&self) -> Vec<usize> {
        let mut out = Vec::new();
        collect_inputs(&self.expr, &mut out);
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The formula read again against another list of metric names (the view's, once some
    /// metrics are selected); `metrics` holds every input.
    pub fn against(&self, metrics: &[String]) -> Result<Derived, FormulaError> {
        Derived::parse(&format!("{} = {}", self.name, self.formula), metrics)
    }

    /// The formula in the notation of HPCToolkit's metric taxonomies (METRICS.yaml, which
    /// hpcviewer evaluates): each operation a YAML flow sequence `[a, '/', b]`, parenthesised
    /// as read, a unary minus `[-1, '*', x]`, and metric `i` written as `input(i)`.
    pub(crate) fn taxonomy_formula(&self, input: &dyn Fn(usize) -> String) -> String {
        taxonomy(&self.expr, input)
    }

    /// The formula as a tree for a script to evaluate (the HTML report's): a number, `{"m": i}`
    /// for metric `i`, `{"op": "neg", "a": x}`, or `{"op": "+", "a": x, "b": y}` (and `-`,
    /// `*`, `/`).
    pub(crate) fn script_tree(&self) -> serde_json::Value {
        script(&self.expr)
    }

    /// The value for one scope, whose cost of metric `i` is `costs[i]`; `None` where a
    /// division by zero (or an overflow) leaves no number.
    pub fn value(&self, costs: &[Cost]) -> Option<f64> {
        eval(&self.expr, &|i| {
            costs.get(i).map_or(0.0, |c| c.value as f64)
        })
    }
}

fn collect_inputs(e: &Expr, out: &mut Vec<usize>) {
    match e {
        Expr::Number(_) => {}
        Expr::Metric(i) => out.push(*i),
        Expr::Negate(x) => collect_inputs(x, out),
        Expr::Binary(_, a, b) => {
            collect_inputs(a, out);
            collect_inputs(b, out);
        }
    }
}

fn script(e: &Expr) -> serde_json::Value {
    use serde_json::json;
    match e {
        Expr::Number(n) => json!(n),
        Expr::Metric(i) => json!({ "m": i }),
        Expr::Negate(x) => json!({ "op": "neg", "a": script(x) }),
        Expr::Binary(op, a, b) => json!({ "op": op.to_string(), "a": script(a), "b": script(b) }),
    }
}

fn taxonomy(e: &Expr, input: &dyn Fn(usize) -> String) -> String {
    match e {
        // Plain decimals (`1000000`, `0.000001`): YAML 1.1 readers take `1e-6` for a string.
        Expr::Number(n) => format!("{n}"),
        Expr::Metric(i) => input(*i),
        Expr::Negate(x) => format!("[-1, '*', {}]", taxonomy(x, input)),
        Expr::Binary(op, a, b) => {
            format!("[{}, '{op}', {}]", taxonomy(a, input), taxonomy(b, input))
        }
    }
}

fn eval(e: &Expr, metric: &dyn Fn(usize) -> f64) -> Option<f64> {
    let v = match e {
        Expr::Number(n) => *n,
        Expr::Metric(i) => metric(*i),
        Expr::Negate(x) => -eval(x, metric)?,
        Expr::Binary(op, a, b) => {
            let (a, b) = (eval(a, metric)?, eval(b, metric)?);
            match op {
                '+' => a + b,
                '-' => a - b,
                '*' => a * b,
                _ if b == 0.0 => return None,
                _ => a / b,
            }
        }
    };
    v.is_finite().then_some(v)
}

/// A recursive-descent reader of one formula.
struct Parser<'a> {
    text: &'a str,
    at: usize,
    metrics: &'a [String],
}

impl Parser<'_> {
    fn error(&self, what: &str) -> FormulaError {
        FormulaError::Syntax {
            formula: self.text.to_string(),
            why: format!("{what} at character {}", self.at + 1),
        }
    }

    fn skip_spaces(&mut self) {
        let rest = &self.text[self.at..];
        self.at += rest.len() - rest.trim_start().len();
    }

    /// The next character after spaces, not taken.
    fn peek(&mut self) -> Option<char> {
        self.skip_spaces();
        self.text[self.at..].chars().next()
    }

    /// sum = product (('+' | '-') product)*
    fn sum(&mut self) -> Result<Expr, FormulaError> {
        let mut e = self.product()?;
        while let Some(op @ ('+' | '-')) = self.peek() {
            self.at += 1;
            e = Expr::Binary(op, Box::new(e), Box::new(self.product()?));
        }
        Ok(e)
    }

    /// product = factor (('*' | '/') factor)*
    fn product(&mut self) -> Result<Expr, FormulaError> {
        let mut e = self.factor()?;
        while let Some(op @ ('*' | '/')) = self.peek() {
            self.at += 1;
            e = Expr::Binary(op, Box::new(e), Box::new(self.factor()?));
        }
        Ok(e)
    }

    /// factor = '-' factor | '(' sum ')' | number | metric
    fn factor(&mut self) -> Result<Expr, FormulaError> {
        match self.peek() {
            Some('-') => {
                self.at += 1;
                Ok(Expr::Negate(Box::new(self.factor()?)))
            }
            Some('(') => {
                self.at += 1;
                let e = self.sum()?;
                if self.peek() != Some(')') {
                    return Err(self.error("expected ')'"));
                }
                self.at += 1;
                Ok(e)
            }
            Some(c) if c.is_ascii_digit() || c == '.' => self.number(),
            Some(c) if is_name_char(c) => self.metric(),
            Some(_) => Err(self.error("expected a number, a metric or '('")),
            None => Err(self.error("the formula ends early")),
        }
    }

    fn number(&mut self) -> Result<Expr, FormulaError> {
        let rest = &self.text[self.at..];
        let mut end = 0;
        let bytes = rest.as_bytes();
        while end < bytes.len() {
            let c = bytes[end] as char;
            let exponent_sign =
                (c == '+' || c == '-') && end > 0 && matches!(bytes[end - 1], b'e' | b'E');
            if c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || exponent_sign {
                end += 1;
            } else {
                break;
            }
        }
        let n: f64 = rest[..end]
            .parse()
            .map_err(|_| self.error("not a number"))?;
        self.at += end;
        Ok(Expr::Number(n))
    }

    /// The longest metric name the run of name characters here starts with.
    fn metric(&mut self) -> Result<Expr, FormulaError> {
        let rest = &self.text[self.at..];
        let run = rest.find(|c: char| !is_name_char(c)).unwrap_or(rest.len());
        let best = (self.metrics.iter().enumerate())
            .filter(|(_, m)| !m.is_empty() && rest[..run].starts_with(m.as_str()))
            .filter(|(_, m)| m.len() == run || rest[m.len()..].starts_with('-'))
            .max_by_key(|(_, m)| m.len());
        let Some((i, m)) = best else {
            return Err(FormulaError::UnknownMetric {
                name: rest[..run].to_string(),
                formula: self.text.to_string(),
                known: self.metrics.join(", "),
            });
        };
        self.at += m.len();
        Ok(Expr::Metric(i))
    }
}

/// Characters a metric name is made of.
fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '@')
}

#[cfg(test)]
#[path = "formula_tests.rs"]
mod tests;
