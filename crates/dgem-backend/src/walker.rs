//! The one stage walker every reader runs under.
//!
//! [`walk`] takes a decision through its stages (`depends_on` levels), skips
//! questions whose `ask_if` fails, splits each stage into groups
//! ([`chunk_groups`]: `alone` questions by themselves, the rest while the
//! reader's [`GroupReader::fits`] holds), hands each group to the reader with
//! the questions its prompt must list and the answer lines of the groups before
//! it, and folds the reads in ([`Walk`]). A reader — the embedded cloze reader,
//! the embedded joint-canvas reader, the vLLM reader — only says how one group
//! is read.
//!
//! Groups of one stage see the answer lines of earlier stages only, unless the
//! schema is `sequential`, when each group also sees the groups read before it;
//! a reader that allows it ([`GroupReader::concurrency`] > 1) has the groups of a
//! non-sequential stage read concurrently, in order of absorption.

use async_trait::async_trait;
use dgem_core::schema::{ChunkPrompt, Question, ValidSchema};
use dgem_core::walk::{chunk_groups, AnsweredGroup, GroupReads, Walk};
use futures_util::StreamExt as _;

use crate::{DecideError, DecideRequest};

/// One group to read.
#[derive(Debug, Clone)]
pub struct GroupCall<'a> {
    /// The group's questions, in order.
    pub questions: Vec<&'a Question>,
    /// The questions its prompt lists: every asked question when the decision is
    /// chained or `chunk_prompt` is `shared`, else the group's own.
    pub listed: Vec<&'a Question>,
    /// Answer lines of the groups it sees (one entry per group, each that
    /// group's answer template with the chosen labels), for prefilling.
    pub lines: Vec<String>,
    /// The same groups with their chosen alternatives (one entry per entry of
    /// `lines`), for a reader that lists options in another order.
    pub answered: Vec<AnsweredGroup>,
    /// `"<id>: <answer name>"` of the questions those groups answered, for
    /// restating in an image state's text (see `dgem_core::walk::Walk::earlier`).
    pub earlier: Vec<String>,
    /// Whether the decision is chained (more than one stage, or sequential).
    pub chained: bool,
    /// The group's index in read order (joint readers seed it `S + 104729·k`).
    pub k: i64,
}

/// How one group of questions is read; [`walk`] does the rest.
#[async_trait]
pub trait GroupReader: Send + Sync {
    /// Whether `trial` (a group being filled) still fits one read.
    ///
    /// # Errors
    /// When the fit cannot be measured (tokenization failed).
    fn fits(&self, schema: &ValidSchema, trial: &[&Question]) -> Result<bool, DecideError>;

    /// Read one group.
    ///
    /// # Errors
    /// [`DecideError`] from the model or for a group that cannot be read.
    async fn read_group(
        &self,
        req: &DecideRequest,
        call: GroupCall<'_>,
    ) -> Result<GroupReads, DecideError>;

    /// Groups of one non-sequential stage read at once (1 = one after another).
    fn concurrency(&self) -> usize {
        1
    }
}

/// The questions a group's prompt lists: every asked question (`every`) when
/// the decision is chained or `chunk_prompt` is `shared`, else the group's own.
pub fn listed_questions<'a>(
    schema: &ValidSchema,
    every: &[&'a Question],
    chained: bool,
    group: &[&'a Question],
) -> Vec<&'a Question> {
    if chained || schema.chunk_prompt == ChunkPrompt::Shared {
        every.to_vec()
    } else {
        group.to_vec()
    }
}

/// What a group sees of the groups before it: answer lines, the answered
/// groups behind them, and the `"<id>: <answer name>"` restatements.
type Seen = (Vec<String>, Vec<AnsweredGroup>, Vec<String>);

fn seen(walk: &Walk) -> Seen {
    (
        walk.lines().to_vec(),
        walk.answered().to_vec(),
        walk.earlier().to_vec(),
    )
}

/// The call for one group.
fn make_call<'a>(
    schema: &ValidSchema,
    every: &[&'a Question],
    chained: bool,
    questions: Vec<&'a Question>,
    (lines, answered, earlier): Seen,
    k: i64,
) -> GroupCall<'a> {
    let listed = listed_questions(schema, every, chained, &questions);
    GroupCall {
        questions,
        listed,
        lines,
        answered,
        earlier,
        chained,
        k,
    }
}

/// Walk `req` with `reader` (see the module docs). Returns the filled [`Walk`]
/// (for [`Walk::finish`]) and whether the decision was chained.
///
/// # Errors
/// An empty state (`state`, see `dgem_core::state`), a dependency cycle, or
/// the first error a group read returns.
pub async fn walk(
    reader: &dyn GroupReader,
    req: &DecideRequest,
) -> Result<(Walk, bool), DecideError> {
    // One rule on every surface: a state with nothing in it is refused before
    // any read (dgem_core::state).
    dgem_core::state::check_informative(&req.state)?;
    let schema = &req.schema;
    let stages = dgem_core::stages::schedule(schema)?;
    let chained = stages.len() > 1 || schema.sequential;
    let every = schema.asked();
    let mut walk = Walk::new();
    let mut k: i64 = 0;
    for stage in &stages {
        let asked = walk.ask(schema, stage);
        let groups = chunk_groups(&asked, |trial| reader.fits(schema, trial))?;
        if schema.sequential || groups.len() == 1 || reader.concurrency() <= 1 {
            // Groups of a non-sequential stage see the lines of earlier stages only.
            let stage_lines = seen(&walk);
            for group in groups {
                let lines = if schema.sequential {
                    seen(&walk)
                } else {
                    stage_lines.clone()
                };
                let out = reader
                    .read_group(req, make_call(schema, &every, chained, group, lines, k))
                    .await?;
                walk.absorb(out, schema.format);
                k += 1;
            }
        } else {
            let lines = seen(&walk);
            let n = groups.len();
            let futs: Vec<_> = groups
                .into_iter()
                .enumerate()
                .map(|(i, g)| {
                    let call = make_call(schema, &every, chained, g, lines.clone(), k + i as i64);
                    reader.read_group(req, call)
                })
                .collect();
            let outs: Vec<Result<GroupReads, DecideError>> = futures_util::stream::iter(futs)
                .buffered(reader.concurrency())
                .collect()
                .await;
            for out in outs {
                walk.absorb(out?, schema.format);
            }
            k += i64::try_from(n).unwrap_or(i64::MAX);
        }
    }
    Ok((walk, chained))
}
