//! One `dgem batch` job: its output opened (or resumed), its remaining rows
//! decided `workers` at a time, and their lines written in input order.
//!
//! Identical rows ([`content_hash`]) are decided once: the first row's line
//! is written, and a later copy is answered from that line, read back from
//! the output by its byte offset, so memory holds a hash, an id and an
//! offset per distinct row, not its decision. Up to [`DEDUPE_CAP`] distinct
//! rows are remembered; past that a repeat is decided again. On resume the
//! same table is rebuilt from the kept lines, in the same order, so a
//! resumed run writes what an uninterrupted one would.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use dgem_bench::batch::dedupe::content_hash;
use dgem_bench::batch::input::{self, InputFormat, InputRow, RowSpec};
use dgem_bench::batch::journal::{self, Journal};
use dgem_bench::shard::Shard;
use dgem_bench::BenchError;
use futures_util::StreamExt as _;
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

use super::progress;
use super::rows::{self, Answer, Ctx, RowResult, Stop};
use crate::commands::bench::bench_err;
use crate::failure::{internal, user, Failure};

/// Distinct rows remembered for answering later copies (each costs a hash,
/// an id and an offset, about 150 bytes). Past it a repeat is decided again:
/// the same answer, at its cost.
pub const DEDUPE_CAP: usize = 250_000;

/// How a run ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Rows of this shard in the input.
    pub rows: usize,
    /// Rows of the whole input, every shard's.
    pub input_rows: usize,
    /// Lines kept from an earlier run.
    pub resumed: usize,
    /// Rows decided in this run.
    pub decided: usize,
    /// Rows answered as an identical earlier row.
    pub duplicates: usize,
    /// Rows whose line is an error (in this run or kept).
    pub failed: usize,
}

/// One file to decide: where its rows are, where its lines go, and how.
#[derive(Debug, Clone)]
pub struct Job {
    /// The input file.
    pub input: PathBuf,
    /// The output file (also the journal).
    pub output: PathBuf,
    /// The input's form; `None` detects it.
    pub format: Option<InputFormat>,
    /// How rows become variables.
    pub spec: RowSpec,
    /// The shard to decide, if any.
    pub shard: Option<Shard>,
    /// Rows decided at once (at least 1).
    pub workers: usize,
    /// Decide identical rows once.
    pub dedupe: bool,
    /// Start over instead of resuming.
    pub overwrite: bool,
    /// Whether a row's key order is part of its content (ad-hoc questions,
    /// where the row is the state; [`content_hash`]).
    pub ordered: bool,
    /// What besides the rows the answers depend on (policy, request,
    /// model settings, backend): hashed with the job's own settings into the
    /// output's fingerprint.
    pub depends_on: Value,
}

/// A job whose output is open: the rows still to decide.
pub struct Opened {
    rows: Box<dyn Iterator<Item = Result<InputRow, BenchError>> + Send>,
    journal: Journal,
    state: Written,
    /// The counts so far (kept lines included).
    pub summary: Summary,
}

impl Job {
    /// The input's rows of this job's shard, read again from the start.
    ///
    /// # Errors
    /// A user [`Failure`] when the input cannot be opened; the iterator's
    /// items fail as the file's reads do.
    pub fn open_rows(&self) -> Result<impl Iterator<Item = Result<InputRow, Failure>>, Failure> {
        let shard = self.shard;
        Ok(self
            .input_rows()?
            .filter(move |r| in_shard(shard, r))
            .map(|r| r.map_err(bench_err)))
    }

    fn input_rows(&self) -> Result<input::Rows, Failure> {
        input::open(&self.input, self.format, self.spec.clone())
            .map_err(|e| user(anyhow::anyhow!("`--input` {}: {e}", self.input.display())))
    }

    /// The fingerprint of this job's output (hex sha256 of what its answers
    /// depend on), for input read as `format`.
    pub fn fingerprint(&self, format: InputFormat) -> String {
        let print = json!({
            "depends_on": self.depends_on,
            "format": format,
            "spec": self.spec,
            "shard": self.shard,
            "dedupe": self.dedupe,
            "dgem": env!("CARGO_PKG_VERSION"),
        });
        hex::encode(Sha256::digest(print.to_string().as_bytes()))
    }

    /// [`Self::fingerprint`] less the shard: the same for every shard of
    /// one run, kept in a finished output's sidecar for `batch-merge`.
    pub fn run_print(&self, format: InputFormat) -> String {
        let print = json!({
            "depends_on": self.depends_on,
            "format": format,
            "spec": self.spec,
            "dedupe": self.dedupe,
            "dgem": env!("CARGO_PKG_VERSION"),
        });
        hex::encode(Sha256::digest(print.to_string().as_bytes()))
    }

    /// Open the output and the input: resume the output when it was written
    /// under the same arguments (before any pass over the input, so a bad
    /// output is refused at once), count the rows, and check that each kept
    /// line answers its input row.
    ///
    /// # Errors
    /// A user [`Failure`] for an unreadable input or output, an output of
    /// other arguments or held by another run, or an input that changed
    /// under a kept output.
    pub fn open(&self) -> Result<Opened, Failure> {
        let rows = self.input_rows()?;
        let format = rows.format();
        let fingerprint = self.fingerprint(format);
        // An output that cannot be opened is the path the user gave: exit 1.
        let mut opened = Journal::open(&self.output, &fingerprint, self.overwrite).map_err(user)?;
        opened.journal.set_run(self.run_print(format));
        if opened.dropped_bytes > 0 {
            tracing::info!(
                bytes = opened.dropped_bytes,
                "dropped a line cut short by a kill"
            );
        }
        // One pass to count the rows (for the progress bar, the ETA and
        // the sidecar `batch-merge` checks).
        let (mut total, mut all) = (0, 0);
        for r in self.input_rows()? {
            all += 1;
            if in_shard(self.shard, &r) {
                total += 1;
            }
        }
        let mut summary = Summary {
            rows: total,
            input_rows: all,
            resumed: opened.kept,
            ..Summary::default()
        };
        let shard = self.shard;
        let mut rows = rows.filter(move |r| in_shard(shard, r));
        let mut state = Written::new(format == InputFormat::Openai);
        for (i, kept) in opened.journal.kept().map_err(bench_err)?.enumerate() {
            let (offset, line) = kept.map_err(bench_err)?;
            let row = match rows.next() {
                Some(r) => r.map_err(bench_err)?,
                None => {
                    return Err(user(anyhow::anyhow!(
                        "`--output` {} holds {} lines but the input has only {i} rows: the input changed; pass `--overwrite` to start again",
                        self.output.display(),
                        opened.kept
                    )))
                }
            };
            state.restore(&row, &line, offset, i + 1, self, &mut summary)?;
        }
        Ok(Opened {
            rows: Box::new(rows),
            journal: opened.journal,
            state,
            summary,
        })
    }
}

fn in_shard(shard: Option<Shard>, r: &Result<InputRow, BenchError>) -> bool {
    match (shard, r) {
        (Some(s), Ok(row)) => s.contains(&row.id),
        _ => true,
    }
}

impl Opened {
    /// Whether every row already has its line.
    pub fn complete(&self) -> bool {
        self.summary.resumed == self.summary.rows
    }

    /// Close the output of a run that had nothing left to decide, marking
    /// it complete.
    ///
    /// # Errors
    /// The output or its sidecar cannot be written.
    pub fn close(self) -> Result<Summary, Failure> {
        self.journal
            .finish(Some(self.summary.input_rows))
            .map_err(bench_err)?;
        Ok(self.summary)
    }

    /// Decide the remaining rows on `ctx`, writing their lines in input
    /// order, then sync the output (and mark it complete when it is).
    ///
    /// # Errors
    /// An internal [`Failure`] when the model or backend keeps failing or
    /// the output cannot be written; the lines written so far stay.
    pub async fn run(
        mut self,
        ctx: &Arc<Ctx>,
        job: &Job,
        bar: &progress::Bar,
    ) -> Result<Summary, Failure> {
        let result = drive(
            ctx,
            self.rows,
            &mut self.journal,
            &mut self.state,
            &mut self.summary,
            job,
            bar,
        )
        .await;
        let complete = result.is_ok() && self.journal.lines() == self.summary.rows;
        self.journal
            .finish(complete.then_some(self.summary.input_rows))
            .map_err(bench_err)?;
        result.map(|()| self.summary)
    }
}

/// What the run has written, for answering copies of earlier rows.
struct Written {
    /// Content hash → the first row with it: its id, and its line's offset
    /// in the output once written.
    seen: HashMap<String, (String, Option<u64>)>,
    /// Whether the output is in OpenAI Batch's form.
    openai: bool,
}

impl Written {
    fn new(openai: bool) -> Self {
        Self {
            seen: HashMap::new(),
            openai,
        }
    }

    /// Check that `kept` (a line of an earlier run, at byte `offset`)
    /// answers `row`, and remember it for later copies.
    fn restore(
        &mut self,
        row: &InputRow,
        kept: &str,
        offset: u64,
        line_no: usize,
        job: &Job,
        summary: &mut Summary,
    ) -> Result<(), Failure> {
        let value: Value = serde_json::from_str(kept).map_err(internal)?;
        let parsed = rows::parse_line(&value);
        let matches = journal::row_of(&value) == Some(row.index)
            && parsed.as_ref().is_some_and(|(id, _)| *id == row.id);
        let Some((_, result)) = parsed.filter(|_| matches) else {
            return Err(user(anyhow::anyhow!(
                "`--output` {}: line {line_no} does not answer input row {} (`{}`): the input changed since it was written; pass `--overwrite` to start again",
                job.output.display(),
                row.index,
                row.id
            )));
        };
        if result.as_ref().map_or(true, Answer::failed) {
            summary.failed += 1;
        }
        if let (Ok(item), true) = (&row.item, job.dedupe) {
            let hash = content_hash(item, job.ordered);
            if !self.seen.contains_key(&hash) && self.seen.len() < DEDUPE_CAP {
                self.seen.insert(hash, (row.id.clone(), Some(offset)));
            }
        }
        Ok(())
    }

    /// The answer of the first row with `hash`, read back from its line.
    fn answer_of(&self, journal: &Journal, hash: &str) -> Result<RowResult, Failure> {
        let offset = self.seen.get(hash).and_then(|(_, o)| *o).ok_or_else(|| {
            internal(anyhow::anyhow!(
                "a repeated row's first copy has no line yet"
            ))
        })?;
        let line = journal.line_at(offset).map_err(bench_err)?;
        let value: Value = serde_json::from_str(&line).map_err(internal)?;
        rows::parse_line(&value).map(|(_, r)| r).ok_or_else(|| {
            internal(anyhow::anyhow!(
                "the line at byte {offset} of the output is not a batch line"
            ))
        })
    }
}

/// What a row's future yields.
enum Done {
    /// Decided (or refused) in this run; the hash when it may be reused.
    Fresh(RowResult, Option<String>),
    /// The same content as the row that first had this hash (its id).
    Duplicate(String, String),
}

async fn drive(
    ctx: &Arc<Ctx>,
    rows: impl Iterator<Item = Result<InputRow, BenchError>>,
    journal: &mut Journal,
    state: &mut Written,
    summary: &mut Summary,
    job: &Job,
    bar: &progress::Bar,
) -> Result<(), Failure> {
    let openai = state.openai;
    let dedupe = job.dedupe;
    // The first copy of each content, as rows start (in input order, on one
    // task): a later copy waits for no read.
    let mut started: HashMap<String, String> = state
        .seen
        .iter()
        .map(|(h, (id, _))| (h.clone(), id.clone()))
        .collect();
    let stream = futures_util::stream::iter(rows).map(|r| {
        let ctx = ctx.clone();
        let planned: Result<(InputRow, Option<Done>, Option<String>), Failure> =
            r.map_err(bench_err).map(|row| match &row.item {
                Err(e) => {
                    let e = e.clone();
                    (row, Some(Done::Fresh(Err(e), None)), None)
                }
                Ok(item) if dedupe => {
                    let hash = content_hash(item, job.ordered);
                    match started.get(&hash) {
                        Some(first) => {
                            let first = first.clone();
                            (row, Some(Done::Duplicate(hash, first)), None)
                        }
                        None if started.len() < DEDUPE_CAP => {
                            started.insert(hash.clone(), row.id.clone());
                            (row, None, Some(hash))
                        }
                        None => (row, None, None),
                    }
                }
                Ok(_) => (row, None, None),
            });
        async move {
            let (row, done, hash) = planned?;
            let done = match done {
                Some(d) => d,
                None => {
                    let item = row
                        .item
                        .as_ref()
                        .map_err(|e| internal(anyhow::anyhow!("{}", e.message)))?;
                    let result = rows::decide(&ctx, item)
                        .await
                        .map_err(|Stop(e)| internal(e))?;
                    Done::Fresh(result, hash)
                }
            };
            Ok::<_, Failure>((row, done))
        }
    });
    let mut stream = stream.buffered(job.workers.max(1));
    while let Some(next) = stream.next().await {
        let (row, done) = next?;
        let (result, duplicate_of, first_of) = match done {
            Done::Fresh(result, hash) => {
                if result.as_ref().is_ok_and(|a| !a.failed()) {
                    summary.decided += 1;
                }
                (result, None, hash)
            }
            Done::Duplicate(hash, first) => {
                summary.duplicates += 1;
                (state.answer_of(journal, &hash)?, Some(first), None)
            }
        };
        if result.as_ref().map_or(true, Answer::failed) {
            summary.failed += 1;
        }
        let line = rows::line(openai, &row, &result, duplicate_of.as_deref());
        let offset = journal.append(&line.to_string()).map_err(bench_err)?;
        if let Some(h) = first_of {
            state.seen.insert(h, (row.id.clone(), Some(offset)));
        }
        bar.advance(summary.failed);
    }
    Ok(())
}
