//! `dgem batch --calibrate batch`: batch calibration over the whole run
//! ([`dgem_bench::batch::calibrate`]), applied once every row is read.
//!
//! The rows are decided into `<output>.uncalibrated` (the journal, resumed
//! as usual). When it is complete, two passes over it write the output:
//! the first adds every answered question's distribution to the run's
//! [`BatchPrior`]; the second re-reads each answer from its corrected
//! distribution. The answer object is rebuilt from the policy's own
//! question ([`AnswerOut::to_chat_json`], as a live read writes it), with
//! the distribution as read kept under `uncalibrated`, and the decision's
//! diagnostics say which questions were corrected and over how many rows.
//! The output is written to a temporary file and renamed, so it is either
//! absent or whole. Answers from the cascade (`resolved_by`) and abstentions
//! are left as they are, and so is a question answered by fewer than
//! [`dgem_bench::batch::calibrate::MIN_ROWS`] rows.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};

use dgem_bench::batch::calibrate::BatchPrior;
use dgem_bench::batch::input::{InputRow, Item};
use dgem_bench::batch::journal::{self, Complete};
use dgem_core::envelope::AnswerOut;
use dgem_core::readout::aggregate;
use serde_json::{json, Map, Value};

use dgem_service::{DecisionRequest, Service};

use super::{rows, Job, Summary};
use crate::failure::{internal, user, Failure};

/// The journal of a calibrated run: `<output>.uncalibrated`, the lines as
/// read.
pub fn raw_path(output: &Path) -> PathBuf {
    let mut name = output.as_os_str().to_os_string();
    name.push(".uncalibrated");
    PathBuf::from(name)
}

/// What the calibration did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// `(question, rows, corrected)` per question id, in first-seen order.
    pub questions: Vec<(String, usize, bool)>,
    /// Answers whose label changed.
    pub flipped: usize,
}

/// An answer's options and distribution, when batch calibration may touch it.
fn distribution(answer: &Value) -> Option<(Vec<String>, Vec<f64>)> {
    let resolved = answer.get("resolved_by").is_some_and(|v| !v.is_null());
    let abstained = answer.get("abstained").and_then(Value::as_bool) == Some(true);
    // A multi answer's probabilities are each option's own, not one
    // distribution to divide a mean out of (its type does not pick one);
    // its options' yes/no reads are calibrated by the reader.
    let set = answer
        .get("type")
        .and_then(Value::as_str)
        .and_then(dgem_core::schema::QuestionKind::parse)
        .is_some_and(|k| !k.picks_one());
    if resolved || abstained || set {
        return None;
    }
    let p = answer.get("probabilities")?.as_object()?;
    let dist = p
        .values()
        .map(Value::as_f64)
        .collect::<Option<Vec<f64>>>()?;
    Some((p.keys().cloned().collect(), dist))
}

fn lines(path: &Path) -> Result<impl Iterator<Item = Result<Value, Failure>>, Failure> {
    let file = std::fs::File::open(path)
        .map_err(|e| internal(anyhow::anyhow!("{}: {e}", path.display())))?;
    Ok(BufReader::new(file).lines().map(|l| {
        let l = l.map_err(internal)?;
        serde_json::from_str::<Value>(&l).map_err(internal)
    }))
}

/// Make sure `output` may be written by this calibrated run, before any
/// row is read: a file there must be this run's own earlier output (its
/// sidecar holds `fingerprint`); with `overwrite` it is removed now, so a
/// run that stops does not leave an old answer in place.
///
/// # Errors
/// A user [`Failure`] naming `--output` when the file is someone else's or
/// another run's, or cannot be removed.
pub fn claim(output: &Path, fingerprint: &str, overwrite: bool) -> Result<(), Failure> {
    let exists = std::fs::metadata(output).is_ok_and(|m| m.len() > 0);
    if !exists {
        return Ok(());
    }
    if overwrite {
        for p in [output.to_path_buf(), journal::sidecar_path(output)] {
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(user(anyhow::anyhow!("`--output` {}: {e}", p.display()))),
            }
        }
        return Ok(());
    }
    journal::check_owner(output, fingerprint).map_err(user)
}

/// Write `output` from the job's complete journal (`job.output`, see the
/// module docs), and record it as written under `fingerprint`; `service`
/// and `base` prepare each row again for its questions.
///
/// # Errors
/// A user [`Failure`] when the output cannot be written or the input no
/// longer matches the journal; an internal one when the journal cannot be
/// read back.
pub fn write(
    service: &Service,
    base: &DecisionRequest,
    job: &Job,
    output: &Path,
    fingerprint: &str,
    summary: &Summary,
) -> Result<Report, Failure> {
    let raw = job.output.as_path();
    let mut prior = BatchPrior::default();
    let mut order: Vec<String> = Vec::new();
    for line in lines(raw)? {
        let line = line?;
        let Some(answers) = line.pointer("/decision/answers").and_then(Value::as_object) else {
            continue;
        };
        for (q, a) in answers {
            if let Some((opts, dist)) = distribution(a) {
                prior.add(q, &opts, &dist);
                if !order.contains(q) {
                    order.push(q.clone());
                }
            }
        }
    }
    let mut report = Report::default();
    let mut tmp = output.as_os_str().to_os_string();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let file = std::fs::File::create(&tmp)
        .map_err(|e| user(anyhow::anyhow!("`--output` {}: {e}", tmp.display())))?;
    let mut out = std::io::BufWriter::new(file);
    let mut input = job.open_rows()?;
    for line in lines(raw)? {
        let mut line = line?;
        let row = input.next().transpose()?.filter(|row| {
            journal::row_of(&line) == Some(row.index)
                && line.get("id").and_then(Value::as_str) == Some(row.id.as_str())
        });
        let Some(row) = row else {
            return Err(user(anyhow::anyhow!(
                "`--input` {} no longer matches {}: the input changed since the rows were read; pass `--overwrite` to start again",
                job.input.display(),
                raw.display()
            )));
        };
        if let Some(decision) = line.get_mut("decision") {
            calibrate_decision(service, base, &prior, &row, decision, &mut report);
        }
        writeln!(out, "{line}")
            .map_err(|e| user(anyhow::anyhow!("`--output` {}: {e}", tmp.display())))?;
    }
    out.into_inner()
        .map_err(|e| user(anyhow::anyhow!("`--output` {}: {e}", tmp.display())))?
        .sync_all()
        .map_err(|e| user(anyhow::anyhow!("`--output` {}: {e}", tmp.display())))?;
    std::fs::rename(&tmp, output)
        .map_err(|e| user(anyhow::anyhow!("`--output` {}: {e}", output.display())))?;
    let complete = Complete {
        lines: summary.rows,
        input_rows: summary.input_rows,
        run: None,
    };
    journal::own(output, fingerprint, complete).map_err(user)?;
    // Rows and whether corrected, per question, over its option sets.
    let groups = prior.groups();
    report.questions = order
        .into_iter()
        .map(|q| {
            let mine = groups.iter().filter(|(id, _, _)| *id == q);
            let rows = mine.clone().map(|(_, _, g)| g.rows).sum();
            let corrected = mine.clone().any(|(_, _, g)| !g.bias.is_empty());
            (q, rows, corrected)
        })
        .collect();
    Ok(report)
}

/// Re-read `decision`'s answers from their corrected distributions.
fn calibrate_decision(
    service: &Service,
    base: &DecisionRequest,
    prior: &BatchPrior,
    row: &InputRow,
    decision: &mut Value,
    report: &mut Report,
) {
    // The policy's questions for this row (a template may build its
    // options from the row's variables).
    let Ok(Item::Fields(fields)) = &row.item else {
        return;
    };
    let Ok(prepared) = service.prepare(None, rows::request(base, fields)) else {
        return;
    };
    let Some(answers) = decision.get_mut("answers").and_then(Value::as_object_mut) else {
        return;
    };
    let mut done = Map::new();
    for (q, a) in answers.iter_mut() {
        let Some((opts, dist)) = distribution(a) else {
            continue;
        };
        let Some(new) = prior.apply(q, &opts, &dist) else {
            continue;
        };
        let Some(question) = prepared
            .request
            .schema
            .questions
            .iter()
            .find(|x| x.id == *q)
        else {
            continue;
        };
        let names: Vec<String> = question
            .alternatives
            .iter()
            .map(|x| x.name.clone())
            .collect();
        if names != opts {
            continue;
        }
        let before = a.get("label").cloned();
        let mut rebuilt = AnswerOut::new(question.clone(), names, aggregate(&[new])).to_chat_json();
        if let Some(m) = rebuilt.as_object_mut() {
            m.insert("uncalibrated".into(), a["probabilities"].clone());
            if let Some(order) = a.get("order_sensitivity") {
                m.insert("order_sensitivity".into(), order.clone());
            }
        }
        if rebuilt.get("label") != before.as_ref() {
            report.flipped += 1;
        }
        *a = rebuilt;
        let rows = prior.group(q, &opts).rows;
        done.insert(q.clone(), json!({"method": "batch", "rows": rows}));
    }
    if let Some(d) = decision
        .get_mut("diagnostics")
        .and_then(Value::as_object_mut)
    {
        if !done.is_empty() {
            d.insert("batch_calibration".into(), Value::Object(done));
        }
    }
}
