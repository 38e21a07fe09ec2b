//! Orchestration of one decision over vLLM (serving.md §7): stages, `ask_if`
//! skips, chunking into groups, chained prefixes with earlier answers prefilled,
//! parallel groups, and the §8.2 diagnostics.

use std::collections::HashMap;
use std::time::Instant;

use dgem_core::envelope::{
    AnswerOut, Diagnostics, QuestionDiagnostics, SamplesDiagnostics, Skip, Timing,
};
use dgem_core::prompt::{state_text, system_text, SystemTextSpec};
use dgem_core::readout::aggregate;
use dgem_core::schema::{AnswerFormat, ChunkPrompt, Question, ValidSchema};
use dgem_core::slots::answer_text;
use dgem_core::stages::schedule;
use dgem_core::tokenizer::TokenId;
use dgem_core::CoreError;
use dgem_engine::{DecideRequest, Decision, EngineError};
use futures_util::StreamExt as _;
use indexmap::IndexMap;
use serde_json::Value;

use crate::config::{GROUP_SEED_STRIDE, MAX_PARALLEL};
use crate::group::{GroupOut, GroupPlan, Route};
use crate::VllmDecider;

/// Everything accumulated while absorbing groups.
#[derive(Default)]
struct Acc {
    answers: IndexMap<String, Option<AnswerOut>>,
    names: HashMap<String, Option<String>>,
    skipped: IndexMap<String, Skip>,
    lines: Vec<String>,
    stages: Vec<Vec<String>>,
    chunks: Vec<Vec<String>>,
    qdiag: IndexMap<String, QuestionDiagnostics>,
    tops: Vec<IndexMap<String, (String, f64, f64)>>,
    policies: Vec<Value>,
    thoughts: Vec<Value>,
    n_reads: u32,
    reads: u32,
    forward_ms: f64,
    prompt_tokens: usize,
}

impl Acc {
    /// serving.md §7.3 `absorb`.
    fn absorb(&mut self, out: GroupOut, format: AnswerFormat) {
        let n = u32::try_from(out.reads.len()).unwrap_or(u32::MAX);
        self.reads += n;
        self.n_reads = self.n_reads.max(n);
        self.forward_ms += out.forward_ms;
        self.prompt_tokens = self.prompt_tokens.max(out.prompt_tokens.unwrap_or(0));
        self.policies.push(out.policy);
        self.thoughts.extend(out.thought);
        self.chunks
            .push(out.questions.iter().map(|q| q.id.clone()).collect());
        let mut chosen = Vec::with_capacity(out.questions.len());
        for (qi, q) in out.questions.iter().enumerate() {
            let dists: Vec<Vec<f64>> = out.reads.iter().map(|r| r[qi].probs.clone()).collect();
            for (j, read) in out.reads.iter().enumerate() {
                if self.tops.len() <= j {
                    self.tops.push(IndexMap::new());
                }
                let r = &read[qi];
                let top = dgem_core::readout::argmax(&r.probs);
                let label = out.labels[qi].get(top).cloned().unwrap_or_default();
                let p = r.probs.get(top).copied().unwrap_or(0.0);
                self.tops[j].insert(q.id.clone(), (label, p, r.entropy));
            }
            let r0 = &out.reads[0][qi];
            self.qdiag.insert(
                q.id.clone(),
                QuestionDiagnostics {
                    pos: out.slots[qi].pos,
                    entropy: out.reads.iter().map(|r| r[qi].entropy).collect(),
                    label_mass: r0.label_mass,
                    argmax_is_label: r0.argmax_is_label,
                    uncalibrated: None,
                },
            );
            let answer = AnswerOut {
                question: q.clone(),
                labels: out.labels[qi].clone(),
                aggregate: aggregate(&dists),
            };
            chosen.push(answer.aggregate.top);
            self.names
                .insert(q.id.clone(), Some(answer.answer_name().to_owned()));
            self.answers.insert(q.id.clone(), Some(answer));
        }
        let refs: Vec<&Question> = out.questions.iter().collect();
        self.lines
            .push(answer_text(&refs, &out.labels, &chosen, format));
    }

    /// The level's questions that pass their `ask_if` conditions; the rest are
    /// recorded as skipped.
    fn ask<'a>(&mut self, schema: &'a ValidSchema, level: &[String]) -> Vec<&'a Question> {
        let mut asked = Vec::new();
        for id in level {
            let Some(q) = schema.question(id) else {
                continue;
            };
            let failed = q.ask_if.iter().find(|(dep, vals)| {
                let was = self.names.get(*dep).cloned().flatten();
                !was.as_ref().is_some_and(|w| vals.contains(w))
            });
            if let Some((dep, vals)) = failed {
                let was = self.names.get(dep).cloned().flatten();
                self.skipped.insert(
                    q.id.clone(),
                    Skip {
                        because: dep.clone(),
                        was,
                        wanted: vals.clone(),
                    },
                );
                self.answers.insert(q.id.clone(), None);
                self.names.insert(q.id.clone(), None);
                continue;
            }
            asked.push(q);
        }
        asked
    }
}

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
        let mut groups: Vec<Vec<Question>> = Vec::new();
        let mut cur: Vec<Question> = Vec::new();
        for q in asked {
            if q.alone == Some(true) {
                if !cur.is_empty() {
                    groups.push(std::mem::take(&mut cur));
                }
                groups.push(vec![(*q).clone()]);
                continue;
            }
            let mut trial: Vec<&Question> = cur.iter().collect();
            trial.push(q);
            let labels: Vec<Vec<String>> = trial
                .iter()
                .map(|x| dgem_core::labels::labels_for(x, self.mode))
                .collect();
            let text = answer_text(&trial, &labels, &vec![0; trial.len()], schema.format);
            let enc = self
                .tok
                .encode(&text)
                .map_err(|e| EngineError::from(CoreError::from(e)))?;
            let rows = self.scaffold.full.len() + enc.len() + 1;
            if rows > limit && !cur.is_empty() {
                groups.push(std::mem::replace(&mut cur, vec![(*q).clone()]));
            } else {
                cur.push((*q).clone());
            }
        }
        if !cur.is_empty() {
            groups.push(cur);
        }
        Ok(groups)
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

    let mut acc = Acc::default();
    let mut k: i64 = 0;
    for level in &levels {
        let asked = acc.ask(schema, level);
        if asked.is_empty() {
            continue;
        }
        acc.stages
            .push(asked.iter().map(|q| q.id.clone()).collect());
        let groups = d.chunk_groups(schema, &asked)?;
        if schema.sequential || groups.len() == 1 {
            for g in groups {
                let p = plan(g, &acc.lines)?;
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
                let p = plan(g, &acc.lines)?;
                let seed = req.seed + GROUP_SEED_STRIDE * (k + i as i64);
                futs.push(d.run_group(schema, &state, p, seed));
            }
            let outs: Vec<Result<GroupOut, EngineError>> = futures_util::stream::iter(futs)
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
    Ok(finish(
        d,
        schema,
        acc,
        chained,
        prefix_thought,
        state_tokens,
        started,
    ))
}

fn finish(
    d: &VllmDecider,
    schema: &ValidSchema,
    mut acc: Acc,
    chained: bool,
    prefix_thought: Option<Value>,
    state_tokens: usize,
    started: Instant,
) -> Decision {
    let answers: IndexMap<String, Option<AnswerOut>> = schema
        .asked()
        .iter()
        .filter_map(|q| acc.answers.shift_remove(&q.id).map(|a| (q.id.clone(), a)))
        .collect();
    let thought = prefix_thought.or_else(|| match acc.thoughts.len() {
        0 => None,
        1 => acc.thoughts.pop(),
        _ => Some(Value::Array(acc.thoughts)),
    });
    let policy = if acc.policies.len() == 1 {
        acc.policies.pop().unwrap_or(Value::Null)
    } else {
        Value::Array(acc.policies)
    };
    let chunk_prompt = if chained {
        "full"
    } else if schema.chunk_prompt == ChunkPrompt::Shared {
        "shared"
    } else {
        "own"
    };
    let info = &d.info;
    let diagnostics = Diagnostics {
        steps: schema.steps,
        layout: schema.layout.as_str().to_owned(),
        isolated: schema
            .questions
            .iter()
            .filter(|q| q.alone == Some(true))
            .map(|q| q.id.clone())
            .collect(),
        stages: acc.stages,
        skipped: acc.skipped,
        chunks: acc.chunks,
        chunk_prompt: chunk_prompt.into(),
        sequential: schema.sequential,
        conditioning: chained.then(|| "prefill".to_owned()),
        thought,
        samples: SamplesDiagnostics {
            n: acc.n_reads,
            tops: acc.tops,
            policy,
        },
        timing: Timing {
            total_ms: started.elapsed().as_secs_f64() * 1e3,
            reads: acc.reads,
            queue_ms: 0.0,
            forward_ms: acc.forward_ms,
            calibration_ms: 0.0,
        },
        prompt_tokens: Some(acc.prompt_tokens).filter(|&n| n > 0),
        cached_tokens: 0,
        state_tokens,
        questions: acc.qdiag,
        engine: info.engine.clone(),
        constrained: d.cfg.constrained,
        model: info.model_id.clone(),
        model_sha256: None,
        label_mode: d.mode.as_str().to_owned(),
        slot_reading: "joint".into(),
        calibration: None,
        note: None,
    };
    Decision {
        answers,
        diagnostics,
    }
}
