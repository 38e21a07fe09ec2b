//! Joint-canvas reading for bidirectional token-level backends (masked LMs,
//! diffusion LMs run in process): every question of a group is read in **one**
//! pass from a canvas that holds the whole answer template.
//!
//! Per group: the prompt (BOS and the chat turn listing the group's questions,
//! or every question when chained, with earlier answer lines prefilled) is
//! followed by the answer template `id: label` (each question at its first
//! label), the end-of-turn token and padding to a multiple of 16; every slot
//! position then gets a random token drawn with Python's `random.Random(seed)`
//! (the "noise draw", seed `S + 7919·r` for read `r`). The backend returns the
//! label log-probabilities at each slot position itself (a bidirectional model
//! sees both sides), and each slot's restricted softmax is its answer. The stage
//! walk is the shared one ([`dgem_backend::walker`]); the canvas and slot rules are
//! [`dgem_core::slots`]. The vLLM reader (`dgem-backend-vllm`) follows the same
//! rules over HTTP; this one reads any [`Backend`](dgem_backend::Backend) whose
//! attention is bidirectional.

use dgem_backend::walker::{self, GroupCall, GroupReader};
use dgem_backend::{SequenceRead, SlotQuery};
use dgem_core::envelope::Scoring;
use dgem_core::labels::labels_for;
use dgem_core::prompt::{chat_prompt, state_range, state_text, system_text, SystemTextSpec};
use dgem_core::readout::{auto_extends, entropy, sample_plan, SlotRead};
use dgem_core::schema::{AnswerFormat, Question, ValidSchema};
use dgem_core::slots::{
    answer_text, canvas_width, resolve_template, seed_canvas, CanvasTokens, ResolvedTemplate,
    TemplateSpec, DEFAULT_CANVAS_STEP, GROUP_SEED_STRIDE, READ_SEED_STRIDE,
};
use dgem_core::tokenizer::{encode_with_plain_span, TokenId, Tokenizer};
use dgem_core::walk::{policy_json, GroupReads, ReaderFacts};
use dgem_core::CoreError;
use tracing::Instrument as _;

use crate::cloze::label_read;
use crate::{DecideError, DecideRequest, Decision, Engine};

fn tokens_of(tok: &dyn Tokenizer, text: &str) -> Result<Vec<TokenId>, DecideError> {
    Ok(tok.encode(text).map_err(CoreError::from)?)
}

struct Group<'a> {
    questions: Vec<&'a Question>,
    prompt: Vec<TokenId>,
    template: ResolvedTemplate,
    width: usize,
}

/// The joint-canvas reader under the shared stage walker.
struct JointReader<'a> {
    engine: &'a Engine,
    tok: &'a dyn Tokenizer,
    mode: dgem_core::labels::LabelMode,
    canvas_len: usize,
    max_tokens: usize,
    ids: CanvasTokens,
    state: String,
    /// Whether `state` holds a special-token string
    /// ([`Tokenizer::holds_special`]), found once per decision: then its
    /// bytes are encoded as ordinary text.
    state_special: bool,
}

#[async_trait::async_trait]
impl GroupReader for JointReader<'_> {
    /// The group's answer template plus the end-of-turn token fits the canvas
    /// (`chunk_rows` when set).
    fn fits(&self, schema: &ValidSchema, trial: &[&Question]) -> Result<bool, DecideError> {
        let limit = schema.chunk_rows.unwrap_or(self.canvas_len);
        let labels: Vec<Vec<String>> = trial.iter().map(|q| labels_for(q, self.mode)).collect();
        let text = answer_text(trial, &labels, &vec![0; trial.len()], schema.format);
        Ok(tokens_of(self.tok, &text)?.len() < limit)
    }

    async fn read_group(
        &self,
        req: &DecideRequest,
        call: GroupCall<'_>,
    ) -> Result<GroupReads, DecideError> {
        let schema = &req.schema;
        let join = match schema.format {
            AnswerFormat::Lines => "\n",
            AnswerFormat::Indexed => " ",
        };
        let sys = system_text(&SystemTextSpec {
            questions: &call.listed,
            instructions: schema.instructions.as_deref(),
            format: schema.format,
            mode: self.mode,
            chunked: false,
            wording: None,
        });
        let mut prompt: Vec<TokenId> = self.tok.bos_id().into_iter().collect();
        let turns = &self.engine.backend.info().chat_turns;
        let text = chat_prompt(turns, schema.layout, &sys, &self.state);
        // The state is untrusted: a special-token string in it is read as
        // text (`Tokenizer::encode_ordinary`).
        if self.state_special {
            let range = state_range(turns, schema.layout, &sys, &self.state);
            prompt.extend(encode_with_plain_span(self.tok, &text, range).map_err(CoreError::from)?);
        } else {
            prompt.extend(tokens_of(self.tok, &text)?);
        }
        // Earlier answers are prefilled; the template then continues their line.
        let lead = if call.lines.is_empty() {
            String::new()
        } else {
            prompt.extend(tokens_of(self.tok, &call.lines.join(join))?);
            join.to_owned()
        };
        let labels: Vec<Vec<String>> = call
            .questions
            .iter()
            .map(|q| labels_for(q, self.mode))
            .collect();
        let template = resolve_template(
            self.tok,
            &TemplateSpec {
                questions: &call.questions,
                labels: &labels,
                head: &[],
                lead: &lead,
                format: schema.format,
                canvas_len: self.canvas_len,
            },
        )?;
        let width = canvas_width(template.tokens.len(), self.canvas_len, DEFAULT_CANVAS_STEP);
        if prompt.len() + width > self.max_tokens {
            return Err(DecideError::Schema(dgem_core::SchemaError::new(
                "state",
                format!(
                    "the prompt and canvas are {} tokens; the model holds {} (shorten the state)",
                    prompt.len() + width,
                    self.max_tokens
                ),
            )));
        }
        let group = Group {
            questions: call.questions,
            prompt,
            template,
            width,
        };
        let seed = req.seed + GROUP_SEED_STRIDE * call.k;
        read_group(self.engine, req, &group, labels, seed, self.ids).await
    }
}

/// Decide with joint-canvas reads (see the module docs).
pub(crate) async fn decide(engine: &Engine, req: &DecideRequest) -> Result<Decision, DecideError> {
    let tok_arc = engine.backend.tokenizer();
    let tok = tok_arc.as_ref();
    let info = engine.backend.info();
    let state = state_text(&req.state);
    let state_special = tok.holds_special(&state).map_err(CoreError::from)?;
    let reader = JointReader {
        engine,
        tok,
        mode: engine.label_mode(),
        canvas_len: engine.config.canvas_len,
        max_tokens: info.max_tokens,
        ids: CanvasTokens {
            turn_close: tokens_of(tok, "<end_of_turn>")?
                .first()
                .copied()
                .unwrap_or(0),
            pad: 0,
            vocab: u32::try_from(tok.vocab_size()).unwrap_or(u32::MAX),
        },
        state,
        state_special,
    };
    let (walk, chained) = walker::walk(&reader, req).await?;
    let facts = ReaderFacts {
        restated: false,
        prompt_wording: None,
        runtime: info.runtime.clone(),
        model: info.model_id.clone(),
        model_sha256: info.model_sha256.clone(),
        label_mode: reader.mode,
        slot_reading: dgem_core::envelope::SlotReading::Joint,
        constrained: !engine.config.vocab_diagnostics,
        calibration: None,
        chained,
        prefix_thought: None,
        state_tokens: if reader.state_special {
            tok.encode_ordinary(&reader.state)
        } else {
            tok.encode(&reader.state)
        }
        .map_err(CoreError::from)?
        .len(),
    };
    let (answers, diagnostics) = walk.finish(&req.schema, facts);
    Ok(Decision {
        answers,
        diagnostics,
    })
}

/// The canvas reads `reads` of one group, sent in one backend call.
async fn run_reads(
    engine: &Engine,
    group: &Group<'_>,
    seed: i64,
    reads: std::ops::Range<u32>,
    ids: CanvasTokens,
) -> Result<(Vec<Vec<SlotRead>>, dgem_backend::ForwardStats), DecideError> {
    let seqs: Vec<SequenceRead> = reads
        .map(|r| {
            let canvas = seed_canvas(
                &group.template,
                group.width,
                seed + READ_SEED_STRIDE * i64::from(r),
                ids,
            );
            let mut tokens = group.prompt.clone();
            tokens.extend(canvas);
            let slots = group
                .template
                .slots
                .iter()
                .map(|s| SlotQuery {
                    pos: group.prompt.len() + s.pos,
                    labels: s.label_ids.iter().map(|&id| vec![id]).collect(),
                    vocab: engine.config.vocab_diagnostics,
                })
                .collect();
            SequenceRead {
                tokens,
                slots,
                reuse_points: Vec::new(),
                policy_point: None,
            }
        })
        .collect();
    let n = seqs.len();
    let span = crate::cloze::forward_span(&engine.backend.info().runtime, seqs.len());
    let out = engine.backend.forward(seqs).instrument(span).await?;
    if out.sequences.len() != n {
        return Err(DecideError::Backend(dgem_backend::BackendError::Model(
            "backend returned fewer canvases than requested".into(),
        )));
    }
    let reads = out
        .sequences
        .iter()
        .map(|slots| {
            group
                .template
                .slots
                .iter()
                .zip(slots)
                .map(|(slot, s)| label_read(s, |t| slot.label_ids.contains(&t)))
                .collect()
        })
        .collect();
    Ok((reads, out.stats))
}

async fn read_group(
    engine: &Engine,
    req: &DecideRequest,
    group: &Group<'_>,
    labels: Vec<Vec<String>>,
    seed: i64,
    ids: CanvasTokens,
) -> Result<GroupReads, DecideError> {
    let samples = req.schema.samples;
    let (first, extra) = sample_plan(samples);
    let (mut reads, stats) = run_reads(engine, group, seed, 0..first, ids).await?;
    let (mut queue_ms, mut forward_ms) = (stats.queue_ms, stats.forward_ms);
    let mut cached = stats.cached_tokens;
    let first_entropy: Vec<(String, f64)> = group
        .questions
        .iter()
        .zip(reads.first().into_iter().flatten())
        .map(|(q, r)| (q.id.clone(), entropy(&r.probs)))
        .collect();
    let ents: Vec<f64> = first_entropy.iter().map(|(_, h)| *h).collect();
    let extended = auto_extends(samples, &ents);
    if extended {
        let (more, s) = run_reads(engine, group, seed, first..first + extra, ids).await?;
        reads.extend(more);
        queue_ms += s.queue_ms;
        forward_ms += s.forward_ms;
        cached += s.cached_tokens;
    }
    let n = group.questions.len();
    Ok(GroupReads {
        questions: group.questions.iter().map(|q| (*q).clone()).collect(),
        labels,
        reads,
        pos: group.template.slots.iter().map(|s| s.pos).collect(),
        scoring: vec![Scoring::Canvas; n],
        uncalibrated: vec![None; n],
        order_reads: vec![Vec::new(); n],
        order_prior: false,
        policy: policy_json(samples, extended, &first_entropy),
        thought: None,
        queue_ms,
        forward_ms,
        calibration_ms: 0.0,
        prompt_tokens: group.prompt.len() + group.width,
        cached_tokens: cached,
        // The answer template plus the end-of-turn token, as a canvas reader counts.
        rows: group.template.tokens.len() + 1,
    })
}
