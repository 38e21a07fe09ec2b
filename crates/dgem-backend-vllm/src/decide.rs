//! Orchestration of one decision over vLLM (serving.md §7): stages, `ask_if`
//! skips, chunking into groups, chained prefixes with earlier answers prefilled,
//! parallel groups. The bookkeeping (skips, groups, prefill lines, tops and the
//! diagnostics builder) is the shared [`dgem_core::walk`].

use std::time::Instant;

use dgem_backend::{DecideRequest, Decision, EngineError};
use dgem_core::prompt::{state_text, system_text, SystemTextSpec};
use dgem_core::schema::{AnswerFormat, ChunkPrompt, Question, ValidSchema};
use dgem_core::slots::answer_text;
use dgem_core::stages::schedule;
use dgem_core::tokenizer::TokenId;
use dgem_core::walk::{chunk_groups, GroupReads, ReaderFacts, Walk};
use dgem_core::CoreError;
use futures_util::StreamExt as _;

use crate::config::{GROUP_SEED_STRIDE, MAX_PARALLEL};
use crate::group::{GroupPlan, Route};
use crate::VllmDecider;

impl VllmDecider {
    fn system(&self, schema: &ValidSchema, questions: &[&Question], chunked: bool) -> String {
        system_text(&SystemTextSpec {
            questions,
            instructions: schema.instructions.as_deref(),
            format: schema.format,
            mode: self.mode,
            chunked,
        })
    }

    /// serving.md §7.4 `chunk_groups`: `alone` questions read by themselves; the
    /// rest fill groups up to `chunk_rows` (or the canvas) rows.
    pub(crate) fn chunk_groups(
        &self,
        schema: &ValidSchema,
        asked: &[&Question],
    ) -> Result<Vec<Vec<Question>>, EngineError> {
        let limit = schema.chunk_rows.unwrap_or(self.cfg.canvas_len);
        let groups = chunk_groups(asked, |trial| {
            let labels: Vec<Vec<String>> = trial
                .iter()
                .map(|x| dgem_core::labels::labels_for(x, self.mode))
                .collect();
            let text = answer_text(trial, &labels, &vec![0; trial.len()], schema.format);
            let enc = self
                .tok
                .encode(&text)
                .map_err(|e| EngineError::from(CoreError::from(e)))?;
            // rows = scaffold + template + the end-of-turn token, at most `limit`.
            let rows = self.scaffold.full.len() + enc.len() + 1;
            Ok::<_, EngineError>(rows <= limit)
        })?;
        Ok(groups
            .into_iter()
            .map(|g| g.into_iter().cloned().collect())
            .collect())
    }
}

/// Make one decision (serving.md §7.3).
pub(crate) async fn decide(d: &VllmDecider, req: DecideRequest) -> Result<Decision, EngineError> {
    let started = Instant::now();
    let schema = &req.schema;
    let state = state_text(&req.state);
    let levels = schedule(schema)?;
    let chained = levels.len() > 1 || schema.sequential;
    let all: Vec<&Question> = schema.questions.iter().collect();
    let sys_full = d.system(schema, &all, false);
    let join = match schema.format {
        AnswerFormat::Lines => "\n",
        AnswerFormat::Indexed => " ",
    };
    // The chained prefix: a thought once, or the chat prompt plus the empty scaffold.
    let mut base_ids: Vec<TokenId> = Vec::new();
    let mut prefix_thought = None;
    if chained {
        if schema.think > 0 {
            let t = d
                .think(schema.layout, &sys_full, &state, schema.think)
                .await?;
            base_ids = t.prefix;
            prefix_thought = Some(t.diagnostics);
        } else {
            base_ids = d.chat_prompt_ids(schema.layout, &sys_full, &state)?;
            base_ids.extend(&d.scaffold.full);
        }
    }
    let plan = |group: Vec<Question>, lines: &[String]| -> Result<GroupPlan, EngineError> {
        if !lines.is_empty() {
            let mut ids = base_ids.clone();
            ids.extend(
                d.tok
                    .encode(&lines.join(join))
                    .map_err(|e| EngineError::from(CoreError::from(e)))?,
            );
            return Ok(GroupPlan {
                questions: group,
                route: Route::Tokens(ids),
                sys: sys_full.clone(),
                head: Vec::new(),
                lead: join.to_owned(),
                think: 0,
            });
        }
        if chained {
            let (route, head) = if prefix_thought.is_some() {
                (Route::Tokens(base_ids.clone()), Vec::new())
            } else {
                (Route::Chat, d.scaffold.full.clone())
            };
            return Ok(GroupPlan {
                questions: group,
                route,
                sys: sys_full.clone(),
                head,
                lead: String::new(),
                think: 0,
            });
        }
        let sys = if schema.chunk_prompt == ChunkPrompt::Shared {
            d.system(schema, &all, true)
        } else {
            let refs: Vec<&Question> = group.iter().collect();
            d.system(schema, &refs, false)
        };
        Ok(GroupPlan {
            questions: group,
            route: Route::Chat,
            sys,
            head: d.scaffold.full.clone(),
            lead: String::new(),
            think: schema.think,
        })
    };

    let mut acc = Walk::new();
    let mut k: i64 = 0;
    for level in &levels {
        let asked = acc.ask(schema, level);
        if asked.is_empty() {
            continue;
        }
        let groups = d.chunk_groups(schema, &asked)?;
        if schema.sequential || groups.len() == 1 {
            for g in groups {
                let p = plan(g, acc.lines())?;
                let out = d
                    .run_group(schema, &state, p, req.seed + GROUP_SEED_STRIDE * k)
                    .await?;
                acc.absorb(out, schema.format);
                k += 1;
            }
        } else {
            let n = i64::try_from(groups.len()).unwrap_or(i64::MAX);
            let mut futs = Vec::with_capacity(groups.len());
            for (i, g) in groups.into_iter().enumerate() {
                let p = plan(g, acc.lines())?;
                let seed = req.seed + GROUP_SEED_STRIDE * (k + i as i64);
                futs.push(d.run_group(schema, &state, p, seed));
            }
            let outs: Vec<Result<GroupReads, EngineError>> = futures_util::stream::iter(futs)
                .buffered(MAX_PARALLEL)
                .collect()
                .await;
            for out in outs {
                acc.absorb(out?, schema.format);
            }
            k += n;
        }
    }
    let state_tokens = d
        .tok
        .encode(&state)
        .map_err(|e| EngineError::from(CoreError::from(e)))?
        .len();
    let info = &d.info;
    let facts = ReaderFacts {
        engine: info.engine.clone(),
        model: info.model_id.clone(),
        model_sha256: None,
        label_mode: d.mode,
        slot_reading: dgem_core::envelope::SlotReading::Joint,
        constrained: d.cfg.constrained,
        calibration: None,
        chained,
        prefix_thought,
        state_tokens,
    };
    let (answers, mut diagnostics) = acc.finish(schema, facts);
    diagnostics.timing.total_ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(Decision {
        answers,
        diagnostics,
    })
}
