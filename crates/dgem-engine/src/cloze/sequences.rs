//! The sequences one question is read by after a prompt, and how the
//! backend's readings of them become a slot read (moved from `cloze.rs`
//! unchanged).

use dgem_backend::{SequenceRead, SlotLogits, SlotQuery};
use dgem_core::envelope::Scoring;
use dgem_core::readout::{log_sum_exp, SlotRead};
use dgem_core::slots::ClozeSlot;
use dgem_core::tokenizer::TokenId;
use dgem_core::SchemaError;

use super::ReadQuestion;
use crate::DecideError;

pub(crate) fn short_model(what: &str) -> DecideError {
    DecideError::Backend(dgem_backend::BackendError::Model(format!(
        "backend returned fewer {what} than requested"
    )))
}

/// A read's prompt as tokens, with the prefix lengths later reads of the same
/// policy or request share with it ([`SequenceRead::reuse_points`]).
pub(crate) struct Prompt {
    /// BOS, the chat turn, the prefill.
    pub(crate) tokens: Vec<TokenId>,
    /// Sorted prefix lengths: where the policy's shared prefix ends
    /// (`schema_first`), where the state ends and where the question block's
    /// head after it ends (`document_first`: every question's prompt of the
    /// decision shares what comes before each), and, for a chained policy,
    /// where the model's turn starts (before the prefill).
    pub(crate) reuse_points: Vec<usize>,
    /// The last reuse point every decision of the policy on a state of the
    /// same shape shares ([`SequenceRead::policy_point`]): the end of the
    /// state's head when it is one, else of the policy's shared prefix.
    pub(crate) policy_point: Option<usize>,
}

/// A prompt's text before tokenizing.
pub(crate) struct PromptText {
    /// The chat turn.
    pub(crate) text: String,
    /// Bytes of `text` every decision of the policy shares
    /// ([`policy_prefix_len`]), if any.
    pub(crate) prefix_len: Option<usize>,
    /// Bytes of `text` every prompt of the decision shares whatever it
    /// lists ([`dgem_core::prompt::state_prefix_len`]), if any.
    pub(crate) state_len: Option<usize>,
    /// Bytes of `text` every prompt of the decision shares whatever it
    /// lists, the question block's head included
    /// ([`dgem_core::prompt::head_prefix_len`]), if any.
    pub(crate) head_len: Option<usize>,
    /// Bytes of `text` every decision of the policy on a state whose JSON
    /// object begins with the same key shares
    /// ([`dgem_core::prompt::state_head_len`]), if any.
    pub(crate) state_head_len: Option<usize>,
    /// Bytes of `text` that hold the state ([`dgem_core::prompt::state_range`]):
    /// untrusted text, encoded as ordinary text when it holds a
    /// special-token string.
    pub(crate) state_range: std::ops::Range<usize>,
}

/// The sequences that read one question after `prompt`: one for first-token
/// scoring, one per option for sequence scoring.
///
/// `vocab` asks the backend for the full-vocabulary reading of each slot
/// ([`SlotQuery::vocab`]); sequence scoring always asks (it sums normalized
/// log-probabilities over an option's tokens).
pub(crate) fn question_sequences(
    prompt: &Prompt,
    rq: &ReadQuestion,
    max_tokens: usize,
    vocab: bool,
) -> Result<Vec<SequenceRead>, DecideError> {
    let reuse_points = &prompt.reuse_points;
    let mut base = prompt.tokens.clone();
    base.extend(&rq.slot.cue);
    let fit = |len: usize| -> Result<(), DecideError> {
        if len > max_tokens {
            return Err(DecideError::Schema(SchemaError::new(
                "state",
                format!(
                    "the prompt is {len} tokens; the context holds {max_tokens} (shorten the state, raise the context size with `--context` / `DGEM_CONTEXT`, or use a model with a longer context)"
                ),
            )));
        }
        Ok(())
    };
    match rq.slot.scoring {
        Scoring::Sequence => spellings(&rq.slot)
            .map(|(_, cont)| {
                let mut tokens = base.clone();
                tokens.extend(cont);
                fit(tokens.len())?;
                let slots = cont
                    .iter()
                    .enumerate()
                    .map(|(i, &t)| SlotQuery {
                        pos: base.len() + i,
                        labels: vec![vec![t]],
                        vocab: true,
                    })
                    .collect();
                Ok(SequenceRead {
                    tokens,
                    slots,
                    reuse_points: reuse_points.clone(),
                    policy_point: prompt.policy_point,
                })
            })
            .collect(),
        Scoring::FirstToken | Scoring::Canvas => {
            fit(base.len() + 1)?;
            let pos = base.len();
            Ok(vec![SequenceRead {
                tokens: base,
                slots: vec![SlotQuery {
                    pos,
                    labels: rq.slot.labels.clone(),
                    vocab,
                }],
                reuse_points: reuse_points.clone(),
                policy_point: prompt.policy_point,
            }])
        }
    }
}

/// Every continuation of a sequence-scored slot with the index of its label:
/// each label's main continuation, then its other spellings.
pub(crate) fn spellings(slot: &ClozeSlot) -> impl Iterator<Item = (usize, &Vec<TokenId>)> {
    slot.labels.iter().enumerate().flat_map(move |(i, main)| {
        std::iter::once((i, main)).chain(
            slot.variants
                .get(i)
                .into_iter()
                .flatten()
                .map(move |v| (i, v)),
        )
    })
}

/// A slot read from one slot's logits: the restricted softmax of its label
/// log-probabilities, plus the full-vocabulary reading when the backend
/// returned one (`is_label` says whether its argmax token is a label).
pub(crate) fn label_read(s: &SlotLogits, is_label: impl Fn(TokenId) -> bool) -> SlotRead {
    let read = SlotRead::from_label_logits(&s.label_logprobs);
    match &s.vocab {
        Some(v) => read.with_vocab(&v.label_logprobs, v.entropy, is_label(v.argmax_token)),
        None => read,
    }
}

/// Turn the backend's readings of one question's sequences into a slot read over
/// its labels (listed order). Sequence scoring sums each option's token
/// log-probabilities over the full vocabulary; entropy and `argmax_is_label`
/// come from the row after the cue. First-token scoring takes the restricted
/// softmax of the label log-probabilities, and adds the vocabulary reading
/// when the backend returned one.
pub(crate) fn combine(
    rq: &ReadQuestion,
    outs: &[Vec<SlotLogits>],
) -> Result<SlotRead, DecideError> {
    let first = outs
        .first()
        .and_then(|s| s.first())
        .ok_or_else(|| short_model("slot readings"))?;
    match rq.slot.scoring {
        Scoring::Sequence => {
            // Per spelling, the sum of its token log-probabilities; per label,
            // the log-sum-exp over its spellings.
            let owners: Vec<usize> = spellings(&rq.slot).map(|(i, _)| i).collect();
            if outs.len() != owners.len() {
                return Err(short_model("option sequences"));
            }
            let mut per_label: Vec<Vec<f64>> = vec![Vec::new(); rq.slot.labels.len()];
            for (seq, &owner) in outs.iter().zip(&owners) {
                let mut sum = 0.0;
                for s in seq {
                    let v = s
                        .vocab
                        .as_ref()
                        .ok_or_else(|| short_model("full-vocabulary readings"))?;
                    sum += v.label_logprobs.first().copied().unwrap_or(-1.0e4);
                }
                if let Some(l) = per_label.get_mut(owner) {
                    l.push(sum);
                }
            }
            // A label with no spelling scored gets the floor of a missing token.
            let ll: Vec<f64> = per_label
                .iter()
                .map(|l| log_sum_exp(l).max(-1.0e4))
                .collect();
            let v = first
                .vocab
                .as_ref()
                .ok_or_else(|| short_model("full-vocabulary readings"))?;
            let is_label =
                spellings(&rq.slot).any(|(_, cont)| cont.first() == Some(&v.argmax_token));
            Ok(SlotRead::from_label_logprobs(&ll, v.entropy, is_label))
        }
        Scoring::FirstToken | Scoring::Canvas => Ok(label_read(first, |t| {
            rq.slot.labels.iter().any(|l| l.contains(&t))
        })),
    }
}
