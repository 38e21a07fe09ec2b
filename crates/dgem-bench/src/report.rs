//! Report formatting (`--format table|json|csv|md|github`) and `--fail-under`
//! gates.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::str::FromStr;

use serde_json::{json, Value};

use crate::BenchError;

/// Output format of a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Aligned text tables.
    Table,
    /// `{metrics, breakdown}` as JSON.
    Json,
    /// CSV, one block per table, separated by a blank line.
    Csv,
    /// Markdown tables.
    Md,
    /// Markdown tables (for `$GITHUB_STEP_SUMMARY`) preceded by GitHub Actions
    /// `::notice` lines for the headline metrics.
    Github,
}

impl FromStr for Format {
    type Err = BenchError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "table" => Ok(Self::Table),
            "json" => Ok(Self::Json),
            "csv" => Ok(Self::Csv),
            "md" | "markdown" => Ok(Self::Md),
            "github" => Ok(Self::Github),
            other => Err(BenchError::Invalid(format!(
                "`format` must be one of [table, json, csv, md, github]. Given: `{other}`"
            ))),
        }
    }
}

/// A titled table of strings.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// Title line.
    pub title: String,
    /// Column headers.
    pub columns: Vec<String>,
    /// Rows (same length as `columns`).
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with `columns` and no rows.
    pub fn new(title: impl Into<String>, columns: &[&str]) -> Self {
        Self {
            title: title.into(),
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Append a row.
    pub fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }
}

fn text_table(t: &Table, out: &mut String) {
    let mut w: Vec<usize> = t.columns.iter().map(|c| c.chars().count()).collect();
    for r in &t.rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(x) = w.get_mut(i) {
                *x = (*x).max(c.chars().count());
            }
        }
    }
    let line = |cells: &[String]| -> String {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<width$}", width = w.get(i).copied().unwrap_or(0)))
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let _ = writeln!(out, "{}", t.title);
    let _ = writeln!(out, "{}", line(&t.columns));
    let _ = writeln!(
        out,
        "{}",
        w.iter()
            .map(|n| "-".repeat(*n))
            .collect::<Vec<_>>()
            .join("-+-")
    );
    for r in &t.rows {
        let _ = writeln!(out, "{}", line(r));
    }
}

fn md_table(t: &Table, out: &mut String) {
    let esc = |s: &String| s.replace('|', "\\|");
    let _ = writeln!(out, "**{}**\n", t.title);
    let _ = writeln!(
        out,
        "| {} |",
        t.columns.iter().map(esc).collect::<Vec<_>>().join(" | ")
    );
    let _ = writeln!(
        out,
        "|{}|",
        t.columns
            .iter()
            .map(|_| "---")
            .collect::<Vec<_>>()
            .join("|")
    );
    for r in &t.rows {
        let _ = writeln!(
            out,
            "| {} |",
            r.iter().map(esc).collect::<Vec<_>>().join(" | ")
        );
    }
}

fn csv_cell(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// Render tables (and, for JSON, the metrics and breakdown) in `format`.
pub fn render(
    format: Format,
    tables: &[Table],
    metrics: &BTreeMap<String, f64>,
    breakdown: &Value,
    headline: &[&str],
) -> String {
    let mut out = String::new();
    match format {
        Format::Json => {
            let v = json!({"metrics": metrics, "breakdown": breakdown});
            out = serde_json::to_string_pretty(&v).unwrap_or_default();
            out.push('\n');
        }
        Format::Table => {
            for t in tables {
                text_table(t, &mut out);
                out.push('\n');
            }
        }
        Format::Md => {
            for t in tables {
                md_table(t, &mut out);
                out.push('\n');
            }
        }
        Format::Csv => {
            for (i, t) in tables.iter().enumerate() {
                if i > 0 {
                    out.push('\n');
                }
                let row = |cells: &[String]| {
                    cells
                        .iter()
                        .map(|c| csv_cell(c))
                        .collect::<Vec<_>>()
                        .join(",")
                };
                let _ = writeln!(out, "{}", row(&t.columns));
                for r in &t.rows {
                    let _ = writeln!(out, "{}", row(r));
                }
            }
        }
        Format::Github => {
            for name in headline {
                if let Some(v) = metrics.get(*name) {
                    let _ = writeln!(out, "::notice title=dgem {name}::{name}={}", fmt_metric(*v));
                }
            }
            for t in tables {
                md_table(t, &mut out);
                out.push('\n');
            }
        }
    }
    out
}

/// A metric value for display: 4 significant decimals, no trailing noise.
pub fn fmt_metric(v: f64) -> String {
    if v.is_nan() {
        "n/a".into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        // Counts (`items`, `errors`) and exact values print as integers.
        format!("{}", v as i64)
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.4}")
    }
}

/// Write each table to its own CSV file in `dir` (created if missing), named
/// after its title (`Items` → `items.csv`, `By slot` → `by_slot.csv`), so a
/// spreadsheet or `pandas.read_csv` reads one table per file. Returns the
/// paths written, in table order.
///
/// # Errors
/// [`BenchError::Io`] when the folder or a file cannot be written.
pub fn write_csv_tables(
    dir: &std::path::Path,
    tables: &[Table],
) -> Result<Vec<std::path::PathBuf>, BenchError> {
    std::fs::create_dir_all(dir).map_err(|e| BenchError::io(dir, e))?;
    let mut written = Vec::with_capacity(tables.len());
    let mut used = std::collections::HashSet::new();
    for t in tables {
        let mut slug: String = t
            .title
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        slug = slug.trim_matches('_').to_string();
        while slug.contains("__") {
            slug = slug.replace("__", "_");
        }
        if slug.is_empty() {
            slug = "table".into();
        }
        let mut name = slug.clone();
        let mut n = 2;
        while !used.insert(name.clone()) {
            name = format!("{slug}_{n}");
            n += 1;
        }
        let path = dir.join(format!("{name}.csv"));
        let text = render(
            Format::Csv,
            std::slice::from_ref(t),
            &BTreeMap::new(),
            &Value::Null,
            &[],
        );
        std::fs::write(&path, text).map_err(|e| BenchError::io(&path, e))?;
        written.push(path);
    }
    Ok(written)
}

/// Percent with one decimal.
pub fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// One `--fail-under METRIC=VALUE` gate.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    /// Metric name as in the receipt's `metrics`.
    pub metric: String,
    /// Threshold.
    pub threshold: f64,
}

impl FromStr for Gate {
    type Err = BenchError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            BenchError::Invalid(format!(
                "`--fail-under` must be METRIC=VALUE with a number, e.g. `item_accuracy=0.8`. Given: `{s}`"
            ))
        };
        let (m, v) = s.split_once('=').ok_or_else(bad)?;
        let threshold: f64 = v.trim().parse().map_err(|_| bad())?;
        if m.trim().is_empty() || !threshold.is_finite() {
            return Err(bad());
        }
        Ok(Self {
            metric: m.trim().to_owned(),
            threshold,
        })
    }
}

/// Whether smaller values of `metric` are better (errors, distances, latency);
/// for those a gate fails when the value is *above* the threshold.
pub fn lower_is_better(metric: &str) -> bool {
    [
        "ece",
        "brier",
        "nll",
        "_ms",
        "flip_rate",
        "tvd",
        "tie_rate",
        "jsd",
        "error",
        "refused",
    ]
    .iter()
    .any(|k| metric.contains(k))
}

/// How one `--fail-under` gate came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateResult {
    /// The metric meets its threshold.
    Passed(String),
    /// The metric belongs to a group with no slots (`slots_<group>` is 0):
    /// there is nothing to gate, so the gate holds vacuously.
    Skipped(String),
    /// The metric misses its threshold, is NaN, or is not reported.
    Failed(String),
}

impl GateResult {
    /// The message.
    pub fn message(&self) -> &str {
        match self {
            Self::Passed(m) | Self::Skipped(m) | Self::Failed(m) => m,
        }
    }
}

/// The `slots_<group>` metric, reported as 0, whose group `metric` belongs to:
/// `brier_excess_sequence` belongs to `sequence` when `slots_sequence` is 0.
/// Every `_`-separated suffix of `metric` is tried as a group name, so the
/// rule needs no list of groups; `None` when no such empty group is reported.
fn empty_group(metric: &str, metrics: &BTreeMap<String, f64>) -> Option<String> {
    metric.match_indices('_').find_map(|(i, _)| {
        let key = format!("slots_{}", &metric[i + 1..]);
        (metrics.get(&key) == Some(&0.0)).then_some(key)
    })
}

/// Evaluate gates against metrics, one [`GateResult`] per gate in order.
///
/// Higher-is-better metrics fail when `value < threshold`; lower-is-better
/// metrics ([`lower_is_better`]) fail when `value > threshold`; NaN fails. A
/// gate on a metric the receipt lacks is skipped when the metric's group has
/// no slots (`slots_<group>` reported as 0, as the per-path and per-type
/// metrics of [`crate::suites::quality`] are), and fails otherwise, listing
/// the available names.
pub fn evaluate_gates(gates: &[Gate], metrics: &BTreeMap<String, f64>) -> Vec<GateResult> {
    gates
        .iter()
        .map(|g| {
            let (name, t) = (&g.metric, g.threshold);
            match metrics.get(name) {
                None => match empty_group(name, metrics) {
                    Some(slots) => GateResult::Skipped(format!(
                        "{name}: no slots ({slots} = 0)"
                    )),
                    None => GateResult::Failed(format!(
                        "`--fail-under` metric `{name}` is not reported by this harness; available: [{}]",
                        metrics.keys().cloned().collect::<Vec<_>>().join(", ")
                    )),
                },
                Some(&v) if lower_is_better(name) => {
                    if v.is_nan() || v > t {
                        GateResult::Failed(format!(
                            "{name} = {} is above the limit {t}",
                            fmt_metric(v)
                        ))
                    } else {
                        GateResult::Passed(format!(
                            "{name} = {} is within the limit {t}",
                            fmt_metric(v)
                        ))
                    }
                }
                Some(&v) => {
                    if v.is_nan() || v < t {
                        GateResult::Failed(format!(
                            "{name} = {} is under the threshold {t}",
                            fmt_metric(v)
                        ))
                    } else {
                        GateResult::Passed(format!(
                            "{name} = {} meets the threshold {t}",
                            fmt_metric(v)
                        ))
                    }
                }
            }
        })
        .collect()
}

/// Check gates against metrics; returns one message per failed gate (see
/// [`evaluate_gates`] for the rules).
pub fn check_gates(gates: &[Gate], metrics: &BTreeMap<String, f64>) -> Vec<String> {
    evaluate_gates(gates, metrics)
        .into_iter()
        .filter_map(|r| match r {
            GateResult::Failed(m) => Some(m),
            GateResult::Passed(_) | GateResult::Skipped(_) => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (issue 16): counts printed as `30.0000`.
    #[test]
    fn counts_print_as_integers() {
        assert_eq!(fmt_metric(30.0), "30");
        assert_eq!(fmt_metric(0.0), "0");
        assert_eq!(fmt_metric(1234.0), "1234");
        assert_eq!(fmt_metric(0.25), "0.2500");
        assert_eq!(fmt_metric(152.25), "152.2");
        assert_eq!(fmt_metric(f64::NAN), "n/a");
    }

    #[test]
    fn gates_respect_direction() {
        let m: BTreeMap<String, f64> = [
            ("item_accuracy".to_owned(), 0.7),
            ("ece_10bin".to_owned(), 0.2),
        ]
        .into_iter()
        .collect();
        let g = |s: &str| s.parse::<Gate>().expect("gate");
        assert!(check_gates(&[g("item_accuracy=0.7"), g("ece_10bin=0.25")], &m).is_empty());
        let f = check_gates(
            &[g("item_accuracy=0.8"), g("ece_10bin=0.1"), g("nope=1")],
            &m,
        );
        assert_eq!(f.len(), 3);
        assert!(f[0].contains("under the threshold 0.8"));
        assert!(f[1].contains("above the limit 0.1"));
        assert!(f[2].contains("available: [ece_10bin, item_accuracy]"));
        assert!("accuracy".parse::<Gate>().is_err());
        assert!("x=abc".parse::<Gate>().is_err());
    }

    /// A gate on a metric of a group with no slots is skipped, not failed;
    /// an unknown metric of no empty group still fails as unreported.
    #[test]
    fn gate_on_an_empty_group_is_vacuous() {
        let m: BTreeMap<String, f64> = [
            ("slots_first_token", 12.0),
            ("brier_excess_first_token", 0.0312),
            ("slots_sequence", 0.0),
            ("slots_brackets", 0.0),
            ("overconfidence_error", 0.0),
            ("ece_10bin", 0.1032),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let g = |s: &str| s.parse::<Gate>().expect("gate");
        let r = evaluate_gates(
            &[
                g("ece_10bin=0.10"),
                g("brier_excess_first_token=0"),
                g("brier_excess_sequence=0"),
                g("brier_excess_brackets=0"),
                g("overconfidence_error=0"),
                g("brier_excess_canvas=0"),
                g("slot_accuracy_sequence=0.5"),
            ],
            &m,
        );
        assert_eq!(
            r[0],
            GateResult::Failed("ece_10bin = 0.1032 is above the limit 0.1".into())
        );
        assert_eq!(
            r[1],
            GateResult::Failed("brier_excess_first_token = 0.0312 is above the limit 0".into())
        );
        assert_eq!(
            r[2],
            GateResult::Skipped("brier_excess_sequence: no slots (slots_sequence = 0)".into())
        );
        assert_eq!(
            r[3].message(),
            "brier_excess_brackets: no slots (slots_brackets = 0)"
        );
        assert_eq!(
            r[4],
            GateResult::Passed("overconfidence_error = 0 is within the limit 0".into())
        );
        // `slots_canvas` is not reported at all: an unknown metric.
        assert!(matches!(&r[5], GateResult::Failed(m) if m.contains("is not reported")));
        assert!(matches!(r[6], GateResult::Skipped(_)));
        assert_eq!(
            check_gates(&[g("brier_excess_sequence=0"), g("ece_10bin=0.2")], &m),
            Vec::<String>::new()
        );
        assert_eq!(check_gates(&[g("brier_excess_first_token=0")], &m).len(), 1);
    }

    #[test]
    fn formats_render() {
        let mut t = Table::new("T", &["a", "b"]);
        t.push(vec!["1".into(), "x,y".into()]);
        let m = BTreeMap::new();
        let csv = render(Format::Csv, &[t.clone()], &m, &Value::Null, &[]);
        assert_eq!(csv, "a,b\n1,\"x,y\"\n");
        // One file per table, named after the title (issue 16: CSV output
        // was every table in one stream).
        let dir = tempfile::tempdir().expect("tempdir");
        let mut t2 = Table::new("By slot / type", &["k"]);
        t2.push(vec!["v".into()]);
        let paths = write_csv_tables(dir.path(), &[t.clone(), t2, t.clone()]).expect("writes");
        let names: Vec<String> = paths
            .iter()
            .map(|p| {
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(names, ["t.csv", "by_slot_type.csv", "t_2.csv"]);
        assert_eq!(std::fs::read_to_string(&paths[1]).expect("read"), "k\nv\n");
        let md = render(Format::Md, &[t.clone()], &m, &Value::Null, &[]);
        assert!(md.contains("| a | b |\n|---|---|\n| 1 | x,y |"));
        let txt = render(Format::Table, &[t], &m, &Value::Null, &[]);
        assert!(txt.contains("a | b  \n"), "{txt}");
        assert_eq!("GitHub".parse::<Format>().ok(), Some(Format::Github));
        assert!("xml".parse::<Format>().is_err());
    }
}
