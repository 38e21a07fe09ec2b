//! The figures in README.md and docs/ are the ones in the receipts they cite.
//!
//! A figure taken from a receipt carries a marker right after it, an HTML
//! comment that Markdown does not show:
//!
//! ```text
//! 55.0 %<!-- fig quality_eval.json /metrics/slot_accuracy -->
//! ```
//!
//! naming the receipt (a path under `benchmarks/results/`) and a JSON pointer
//! (RFC 6901: `/`-separated keys, array indices) to the number; a bare key
//! (`slot_accuracy`) is short for `/metrics/slot_accuracy`. The figure is
//! the number just before the marker on its line (`**` bold, `,` thousands
//! separators allowed); followed by `%` it is the receipt's fraction × 100. It
//! must equal the receipt's value rounded to the decimals shown (a half-unit of
//! the last digit either way).
//!
//! Whole output tables of `dgem bench-speed` are checked the same way when
//! their fence says which receipt printed them (```` ```text fig=speed_embedded.json ````):
//! each row's median, min and max ms and its ratio median [min, max].
//!
//! Also checked: every receipt cited by path exists, and every file under
//! `benchmarks/results/` is one that `scripts/receipts` regenerates (or keeps
//! frozen, naming the commit that made it), so one command remakes them all.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn results() -> PathBuf {
    root().join("benchmarks/results")
}

/// README.md and every Markdown file under docs/.
fn documents() -> Vec<PathBuf> {
    let mut docs = vec![root().join("README.md")];
    let mut more: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    more.sort();
    docs.extend(more);
    docs
}

fn receipt(name: &str) -> Result<Value, String> {
    let path = results().join(name);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("receipt {} cannot be read: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("receipt {name} is not JSON: {e}"))
}

/// A number as a document shows it: its value and its decimals.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Shown {
    value: f64,
    decimals: i32,
}

/// The number at the end of `text`, ignoring trailing spaces, `**` and one
/// unit (`%`, `×`, `ms`, `s`, `x`); says whether the unit was `%`.
fn trailing_number(text: &str) -> Option<(Shown, bool)> {
    let mut t = text.trim_end().trim_end_matches('*').trim_end();
    let mut percent = false;
    for unit in ["%", "×", "ms", "s", "x"] {
        if let Some(rest) = t.strip_suffix(unit) {
            percent = unit == "%";
            t = rest.trim_end().trim_end_matches('*').trim_end();
            break;
        }
    }
    let start = t
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_ascii_digit() || *c == '.' || *c == ',')
        .last()
        .map(|(i, _)| i)?;
    let mut digits = t[start..].trim_start_matches([',', '.']).to_owned();
    if t[..start].ends_with(['-', '−']) {
        digits.insert(0, '-');
    }
    parse_shown(&digits).map(|s| (s, percent))
}

fn parse_shown(text: &str) -> Option<Shown> {
    let clean = text.replace(',', "");
    let value: f64 = clean.parse().ok()?;
    let decimals = clean
        .split_once('.')
        .map_or(0, |(_, d)| i32::try_from(d.len()).unwrap_or(0));
    Some(Shown { value, decimals })
}

/// Whether `actual` rounds to the shown figure.
fn agrees(shown: Shown, actual: f64) -> bool {
    let half = 0.5 * 10f64.powi(-shown.decimals);
    (actual - shown.value).abs() <= half + 1e-9
}

/// One `<!-- fig RECEIPT POINTER -->` marker and the figure before it.
fn check_marker(before: &str, spec: &str, at: &str, errors: &mut Vec<String>) {
    let mut parts = spec.split_whitespace();
    let (Some(name), Some(pointer), None) = (parts.next(), parts.next(), parts.next()) else {
        errors.push(format!(
            "{at}: a marker needs `fig RECEIPT POINTER`, got `{spec}`"
        ));
        return;
    };
    let Some((shown, percent)) = trailing_number(before) else {
        errors.push(format!("{at}: no number before the marker `{spec}`"));
        return;
    };
    let value = match receipt(name) {
        Ok(v) => v,
        Err(e) => return errors.push(format!("{at}: {e}")),
    };
    let pointer = if pointer.starts_with('/') {
        pointer.to_owned()
    } else {
        format!("/metrics/{pointer}")
    };
    let Some(actual) = value.pointer(&pointer).and_then(Value::as_f64) else {
        errors.push(format!(
            "{at}: {name} has no number at {pointer} (the marker `{spec}`)"
        ));
        return;
    };
    let actual = if percent { actual * 100.0 } else { actual };
    if shown.decimals == 0 && !percent && actual.abs() < 1.0 && actual != 0.0 {
        // "0" or "1" for a fraction would pass within half a unit.
        errors.push(format!(
            "{at}: {name} {pointer} is a fraction ({actual}): show it with decimals or as a %"
        ));
        return;
    }
    if !agrees(shown, actual) {
        errors.push(format!(
            "{at}: the document says {}{} but {name} {pointer} is {actual}",
            shown.value,
            if percent { " %" } else { "" }
        ));
    }
}

/// Every number in `line`, in order.
fn numbers(line: &str) -> Vec<Shown> {
    line.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
        .map(|t| t.trim_matches([',', '.']))
        .filter(|t| t.chars().any(|c| c.is_ascii_digit()))
        .filter_map(parse_shown)
        .collect()
}

/// One row of a `dgem bench-speed` table against its scenario.
fn check_speed_row(line: &str, scenarios: &Value, at: &str, errors: &mut Vec<String>) -> bool {
    let Some(name) = line.split_whitespace().next() else {
        return false;
    };
    let Some(s) = scenarios.get(name) else {
        return false;
    };
    let what = s.get("what").and_then(Value::as_str).unwrap_or_default();
    let rest = line
        .split_once(what)
        .map_or_else(|| &line[name.len()..], |(_, r)| r);
    let mut expected: Vec<(&str, f64)> = Vec::new();
    for key in ["median_ms", "min_ms", "max_ms"] {
        if let Some(v) = s.get(key).and_then(Value::as_f64) {
            expected.push((key, v));
        }
    }
    for key in ["median", "min", "max"] {
        if let Some(v) = s.pointer(&format!("/ratio/{key}")).and_then(Value::as_f64) {
            expected.push((key, v));
        }
    }
    let shown = numbers(rest);
    if shown.len() < expected.len() {
        errors.push(format!(
            "{at}: the row `{name}` shows {} numbers, its receipt has {}",
            shown.len(),
            expected.len()
        ));
        return true;
    }
    for (shown, (key, v)) in shown.iter().zip(&expected) {
        if !agrees(*shown, *v) {
            errors.push(format!(
                "{at}: the row `{name}` says {} for {key}, the receipt {v}",
                shown.value
            ));
        }
    }
    true
}

/// Where a figure marker starts in `text`: `<!--`, optional spaces, `fig`
/// and a space; returns the comment's start and where its spec starts.
fn marker_start(text: &str) -> Option<(usize, usize)> {
    let mut from = 0;
    while let Some(i) = text[from..].find("<!--") {
        let start = from + i;
        let after = text[start + 4..].trim_start();
        if let Some(rest) = after.strip_prefix("fig") {
            if rest.starts_with(char::is_whitespace) {
                return Some((start, text.len() - rest.len()));
            }
        }
        from = start + 4;
    }
    None
}

/// Checks every marker and every `fig=` block of one document; returns the
/// receipts it cites by path.
fn check_document(path: &Path, errors: &mut Vec<String>) -> BTreeSet<String> {
    let text = std::fs::read_to_string(path).expect("document");
    let doc = path
        .strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string();
    let mut cited = BTreeSet::new();
    // The receipt's scenarios of an open `fig=` block, with where it opened
    // and how many of its rows were checked.
    let mut block: Option<(Value, String, usize)> = None;
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let at = format!("{doc}:{}", i + 1);
        let trimmed = line.trim_start();
        let opener = ["```", "~~~"].into_iter().find(|f| trimmed.starts_with(f));
        if let Some(f) = opener.filter(|f| fence.is_none_or(|open| open == *f)) {
            if fence.take().is_none() {
                fence = Some(f);
                let info = &trimmed[f.len()..];
                if let Some(name) = info.split_whitespace().find_map(|w| w.strip_prefix("fig=")) {
                    cited.insert(name.to_owned());
                    match receipt(name) {
                        Ok(v) => block = Some((v["scenarios"].clone(), at.clone(), 0)),
                        Err(e) => errors.push(format!("{at}: {e}")),
                    }
                }
            } else if let Some((_, opened, 0)) = block.take() {
                errors.push(format!(
                    "{opened}: a `fig=` block with no row of its receipt"
                ));
            }
            continue;
        }
        if let Some((scenarios, _, checked)) = &mut block {
            if check_speed_row(line, scenarios, &at, errors) {
                *checked += 1;
            }
            continue;
        }
        let mut offset = 0;
        while let Some((start, spec_at)) = marker_start(&line[offset..]) {
            let (start, spec_at) = (offset + start, offset + spec_at);
            let Some(len) = line[spec_at..].find("-->") else {
                errors.push(format!("{at}: an unclosed figure marker"));
                break;
            };
            let spec = line[spec_at..spec_at + len].trim();
            if let Some(name) = spec.split_whitespace().next() {
                cited.insert(name.to_owned());
            }
            check_marker(&line[..start], spec, &at, errors);
            offset = spec_at + len + 3;
        }
        for (j, _) in line.match_indices("benchmarks/results/") {
            let tail = &line[j + "benchmarks/results/".len()..];
            let name: String = tail
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || "._-/".contains(*c))
                .collect();
            let name = name.trim_end_matches('.');
            if !name.is_empty() && !name.ends_with('/') && !name.ends_with('_') {
                cited.insert(name.to_owned());
            }
        }
    }
    cited
}

/// The files `scripts/receipts --list` accounts for, each with its status:
/// `current` (remade by the script from clean sources), `legacy REV` (not
/// remade yet: the run of commit REV) or `frozen REV` (cannot be remade).
fn listed() -> std::collections::BTreeMap<String, String> {
    let out = std::process::Command::new("python3")
        .arg(root().join("scripts/receipts"))
        .arg("--list")
        .output()
        .expect("python3 runs scripts/receipts (the CI image installs python3)");
    assert!(out.status.success(), "scripts/receipts --list failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut cols = l.split('\t');
            let name = cols.next()?;
            Some((name.to_owned(), cols.nth(2).unwrap_or_default().to_owned()))
        })
        .collect()
}

fn files_under(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) {
    for e in std::fs::read_dir(dir)
        .expect("benchmarks/results/")
        .flatten()
    {
        let name = format!("{prefix}{}", e.file_name().to_string_lossy());
        if e.path().is_dir() {
            files_under(&e.path(), &format!("{name}/"), out);
        } else {
            out.insert(name);
        }
    }
}

#[test]
fn every_figure_in_the_docs_is_the_one_in_the_receipt_it_cites() {
    let mut errors = Vec::new();
    let mut cited = BTreeSet::new();
    for doc in documents() {
        cited.extend(check_document(&doc, &mut errors));
    }
    for name in &cited {
        if !results().join(name).exists() {
            errors.push(format!(
                "a document cites benchmarks/results/{name}, which is missing"
            ));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn one_command_regenerates_every_receipt() {
    let statuses = listed();
    let listed: BTreeSet<String> = statuses.keys().cloned().collect();
    let mut present = BTreeSet::new();
    files_under(&results(), "", &mut present);
    let unlisted: Vec<_> = present.difference(&listed).collect();
    assert!(
        unlisted.is_empty(),
        "files under benchmarks/results/ that scripts/receipts does not regenerate: {unlisted:?}"
    );
    let missing: Vec<_> = listed.difference(&present).collect();
    assert!(
        missing.is_empty(),
        "scripts/receipts lists missing files: {missing:?}"
    );
    // Each JSON receipt names the dgem commit that made it (a fitted
    // calibration file is named by the receipt of the run it was fitted on).
    // One the script remade says its binary's sources were clean; one not
    // remade yet is the run of the commit the script names for it.
    let mut errors = Vec::new();
    for name in listed.iter().filter(|n| n.ends_with(".json")) {
        let v = receipt(name).expect("receipt");
        if v["format"]
            .as_str()
            .is_some_and(|f| f.starts_with("dgem-calibration"))
        {
            continue;
        }
        let revision = v
            .pointer("/dgem/git_revision")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if revision.len() != 40 {
            errors.push(format!("{name} does not record the commit that made it"));
            continue;
        }
        let status = &statuses[name];
        match status.split_once(' ') {
            None if status == "current" => {
                if v.pointer("/dgem/git_dirty") != Some(&Value::Bool(false)) {
                    errors.push(format!(
                        "{name} is not from a clean build (dgem.git_dirty is not false): \
                         remake it with scripts/receipts"
                    ));
                }
            }
            Some(("legacy" | "frozen", rev)) if revision.starts_with(rev) => {}
            _ => errors.push(format!(
                "{name}: scripts/receipts says `{status}` but the receipt is the run of {revision}"
            )),
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn a_figure_agrees_with_its_receipt_only_at_the_decimals_shown() {
    let (s, pct) = trailing_number("| accuracy | **55.0 %**").expect("number");
    assert!(pct);
    assert_eq!(
        s,
        Shown {
            value: 55.0,
            decimals: 1
        }
    );
    assert!(agrees(s, 0.55 * 100.0));
    assert!(agrees(s, 55.04));
    assert!(!agrees(s, 55.06));
    let (s, pct) = trailing_number("cold 2,546 ms").expect("number");
    assert!(!pct);
    assert_eq!(
        s,
        Shown {
            value: 2546.0,
            decimals: 0
        }
    );
    assert!(agrees(s, 2546.05));
    assert!(!agrees(s, 2547.0));
    let (s, _) = trailing_number("ratio 3.14×").expect("number");
    assert!(agrees(s, 3.1377));
    let (s, _) = trailing_number("excess −0.0199").expect("number");
    assert_eq!(s.value, -0.0199);
    assert!(trailing_number("no figure here").is_none());
    let mut errors = Vec::new();
    check_marker(
        "ECE 0.50",
        "quality_eval.json /metrics/ece_10bin",
        "t",
        &mut errors,
    );
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("says 0.5 but"), "{errors:?}");
    // A bare key is a metric.
    check_marker("ECE 0.50", "quality_eval.json ece_10bin", "t", &mut errors);
    assert_eq!(errors.len(), 2, "{errors:?}");
    check_marker("items 30", "quality_eval.json items", "t", &mut errors);
    assert_eq!(errors.len(), 2, "{errors:?}");
    // A fraction shown as a whole number is refused, not passed within 0.5.
    check_marker(
        "accuracy 1",
        "quality_eval.json slot_accuracy",
        "t",
        &mut errors,
    );
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(errors[2].contains("is a fraction"), "{errors:?}");
    assert_eq!(marker_start("x 1<!--fig a b-->"), Some((3, 10)));
    assert_eq!(marker_start("x 1<!--  fig a b-->"), Some((3, 12)));
    assert_eq!(marker_start("<!-- figure -->"), None);
}

/// The temperatures dgem ships for the small model (gemma3-270m) are the ones the last
/// refit in `scripts/receipts` gave (its fit file, `fitted_at_unix` aside), so
/// the shipped file and `calibration_shipped.md` cannot drift apart.
#[test]
fn the_shipped_temperatures_are_the_receipted_fit() {
    let read = |p: PathBuf| -> Value {
        let mut v: Value =
            serde_json::from_str(&std::fs::read_to_string(&p).expect("fit file")).expect("JSON");
        if let Some(o) = v.as_object_mut() {
            o.remove("fitted_at_unix");
        }
        v
    };
    let shipped = read(root().join("crates/dgem-model/calibration/gemma-3-270m-q4_k_m.json"));
    let fitted = read(results().join("calibration_shipped_fit.json"));
    assert_eq!(
        shipped, fitted,
        "crates/dgem-model/calibration/gemma-3-270m-q4_k_m.json differs from the receipted \
         fit benchmarks/results/calibration_shipped_fit.json: copy the fit in, or regenerate it"
    );
}

/// `scripts/receipts` refuses dirty sources by the same list of paths the
/// build script records the dirty flag by (`DGEM_BUILD_SOURCES`).
#[test]
fn the_receipts_script_checks_the_build_scripts_sources() {
    let script = std::fs::read_to_string(root().join("scripts/receipts")).expect("script");
    let line = script
        .split("\nSOURCES = [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("a SOURCES list in scripts/receipts");
    let listed: Vec<&str> = line
        .split(',')
        .map(|w| w.trim().trim_matches('"'))
        .filter(|w| !w.is_empty())
        .collect();
    let built: Vec<&str> = env!("DGEM_BUILD_SOURCES").split(' ').collect();
    assert_eq!(listed, built);
}
