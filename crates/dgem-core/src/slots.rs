//! Slot resolution: where each question's answer token sits and which token ids
//! stand for its labels.
//!
//! Two readings exist:
//!
//! * **Canvas** (bidirectional models, serving.md §4.6–4.7): the whole answer
//!   template (`id: label` lines) is tokenized once per label variant; each
//!   question's labels must change exactly one token, at one shared position.
//!   [`resolve_template`] finds those positions; [`seed_canvas`] writes a random
//!   token into every slot (the "noise draw").
//! * **Cloze** (causal models): each question is read after `id:` at the end of
//!   the prompt. [`resolve_cloze`] finds, for each label, the first token of the
//!   label written with and without a leading space, and pools them (Gemma has no
//!   `▁5` tokens, so digits come bare while words come `▁`-prefixed). When labels
//!   share a first token, each is scored instead by the log-likelihood of its
//!   whole tokenization.

use rand_mt::Mt;
use serde::Serialize;

use crate::envelope::Scoring;
use crate::error::{CoreError, SchemaError};
use crate::schema::{AnswerFormat, Question};
use crate::tokenizer::{TokenId, Tokenizer};

/// Canvas length of a joint read: the answer template plus the end-of-turn
/// token must fit (the original server's container default `CANVAS_LEN`).
pub const DEFAULT_CANVAS_LEN: usize = 128;
/// Canvas widths are rounded up to a multiple of this (`CANVAS_STEP`).
pub const DEFAULT_CANVAS_STEP: usize = 16;
/// Seed stride between the reads (noise draws) of one group: read `r` uses
/// `seed + 7919·r`; the causal reader seeds its option orders the same way.
pub const READ_SEED_STRIDE: i64 = 7919;
/// Seed stride between the groups of one decision: group `k` uses `seed + 104729·k`.
pub const GROUP_SEED_STRIDE: i64 = 104_729;

/// One resolved canvas slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CanvasSlot {
    /// Question id.
    pub id: String,
    /// Token position of the answer in the template.
    pub pos: usize,
    /// One token id per label, in label order; all distinct.
    pub label_ids: Vec<TokenId>,
}

/// An answer template with its slots (serving.md §4.6 `resolve_template`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResolvedTemplate {
    /// `head + enc(lead + answer_text(all labels at index 0))`.
    pub tokens: Vec<TokenId>,
    /// One slot per question, in question order.
    pub slots: Vec<CanvasSlot>,
}

/// The answer text `id: label` lines (or `idlabel` words) for the chosen label
/// indices (serving.md §4.4).
pub fn answer_text(
    questions: &[&Question],
    labels: &[Vec<String>],
    chosen: &[usize],
    format: AnswerFormat,
) -> String {
    let parts = questions
        .iter()
        .zip(labels)
        .zip(chosen)
        .map(|((q, ls), &i)| {
            let label = ls.get(i).map_or("", String::as_str);
            match format {
                AnswerFormat::Lines => format!("{}: {label}", q.id),
                AnswerFormat::Indexed => format!("{}{label}", q.id),
            }
        });
    let join = match format {
        AnswerFormat::Lines => "\n",
        AnswerFormat::Indexed => " ",
    };
    parts.collect::<Vec<_>>().join(join)
}

/// Inputs of [`resolve_template`].
#[derive(Debug, Clone, Copy)]
pub struct TemplateSpec<'a> {
    /// Questions of the read, in order.
    pub questions: &'a [&'a Question],
    /// Labels per question (see [`crate::labels::labels_for`]).
    pub labels: &'a [Vec<String>],
    /// Tokens that precede the answer (e.g. the thought scaffold).
    pub head: &'a [TokenId],
    /// Text that precedes the first answer (a join string when continuing).
    pub lead: &'a str,
    /// Answer format.
    pub format: AnswerFormat,
    /// Canvas length; the template plus one end-of-turn token must fit.
    pub canvas_len: usize,
}

/// Resolve every question's slot in the answer template (serving.md §4.6).
///
/// # Errors
/// [`CoreError::Schema`] with the serving.md messages: the template does not fit
/// the canvas, a label is not a single token, labels do not share one position,
/// or two labels tokenize to the same id. [`CoreError::Tokenize`] if encoding fails.
pub fn resolve_template(
    tok: &dyn Tokenizer,
    spec: &TemplateSpec<'_>,
) -> Result<ResolvedTemplate, CoreError> {
    let n = spec.questions.len();
    let encode = |chosen: &[usize]| -> Result<Vec<TokenId>, CoreError> {
        let text = format!(
            "{}{}",
            spec.lead,
            answer_text(spec.questions, spec.labels, chosen, spec.format)
        );
        let mut ids = spec.head.to_vec();
        ids.extend(tok.encode(&text)?);
        Ok(ids)
    };
    let zeros = vec![0usize; n];
    let base = encode(&zeros)?;
    if base.len() + 1 > spec.canvas_len {
        return Err(SchemaError::new(
            "questions",
            format!(
                "answer template is {} tokens; the canvas holds {}",
                base.len(),
                spec.canvas_len.saturating_sub(1)
            ),
        )
        .into());
    }
    let mut slots = Vec::with_capacity(n);
    for (qi, q) in spec.questions.iter().enumerate() {
        let labels = &spec.labels[qi];
        let mut pos: Option<usize> = None;
        let mut ids = vec![0; labels.len()];
        for li in 1..labels.len() {
            let mut chosen = zeros.clone();
            chosen[qi] = li;
            let e = encode(&chosen)?;
            if e.len() != base.len() {
                return Err(SchemaError::new(
                    format!("questions[{qi}]"),
                    format!(
                        "question '{}': label '{}' is not a single token (every label must be one token at the answer slot)",
                        q.id, labels[li]
                    ),
                )
                .into());
            }
            let diffs: Vec<usize> = (0..e.len()).filter(|&i| e[i] != base[i]).collect();
            if diffs.len() != 1 || pos.is_some_and(|p| p != diffs[0]) {
                return Err(SchemaError::new(
                    format!("questions[{qi}]"),
                    format!(
                        "question '{}': labels do not share one template slot (label '{}' changes {} positions)",
                        q.id,
                        labels[li],
                        diffs.len()
                    ),
                )
                .into());
            }
            pos = Some(diffs[0]);
            ids[li] = e[diffs[0]];
        }
        let p = pos.ok_or_else(|| {
            SchemaError::new(
                format!("questions[{qi}]"),
                format!("question '{}': needs at least two alternatives", q.id),
            )
        })?;
        ids[0] = base[p];
        ensure_distinct(q, qi, labels, &ids)?;
        slots.push(CanvasSlot {
            id: q.id.clone(),
            pos: p,
            label_ids: ids,
        });
    }
    Ok(ResolvedTemplate {
        tokens: base,
        slots,
    })
}

fn ensure_distinct(
    q: &Question,
    qi: usize,
    labels: &[String],
    ids: &[TokenId],
) -> Result<(), SchemaError> {
    for i in 0..ids.len() {
        for j in i + 1..ids.len() {
            if ids[i] == ids[j] {
                return Err(SchemaError::new(
                    format!("questions[{qi}]"),
                    format!(
                        "question '{}': two labels tokenize to the same id ('{}' and '{}' both read as token {})",
                        q.id, labels[i], labels[j], ids[i]
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Canvas width for a template of `template_len` tokens: the template plus the
/// end-of-turn token, rounded up to a multiple of `step`, capped at `canvas_len`
/// (serving.md §4.7).
pub fn canvas_width(template_len: usize, canvas_len: usize, step: usize) -> usize {
    let step = step.max(1);
    canvas_len.min((template_len + 1).div_ceil(step) * step)
}

/// Token ids used to build a seeded canvas.
#[derive(Debug, Clone, Copy)]
pub struct CanvasTokens {
    /// End-of-turn id written after the template (Gemma: 106).
    pub turn_close: TokenId,
    /// Padding id (Gemma: 0).
    pub pad: TokenId,
    /// Vocabulary size random slot tokens are drawn from (Gemma: 262,144).
    pub vocab: u32,
}

/// Build the seeded canvas of one read (serving.md §4.7): the template, the
/// end-of-turn token, padding to `width`, and at each slot (in question order) a
/// token drawn with Python's `random.Random(seed).randrange(vocab)`.
pub fn seed_canvas(
    template: &ResolvedTemplate,
    width: usize,
    seed: i64,
    ids: CanvasTokens,
) -> Vec<TokenId> {
    let mut canvas = template.tokens.clone();
    canvas.push(ids.turn_close);
    canvas.resize(width.max(canvas.len()), ids.pad);
    let mut rng = python_random(seed);
    for slot in &template.slots {
        if let Some(cell) = canvas.get_mut(slot.pos) {
            *cell = python_randrange(&mut rng, ids.vocab);
        }
    }
    canvas
}

/// An MT19937 seeded like Python's `random.Random(seed)` (`init_by_array` over the
/// 32-bit little-endian words of `|seed|`).
pub fn python_random(seed: i64) -> Mt {
    let mut n = seed.unsigned_abs();
    let mut key = Vec::new();
    while n > 0 {
        key.push((n & 0xffff_ffff) as u32);
        n >>= 32;
    }
    if key.is_empty() {
        key.push(0);
    }
    Mt::new_with_key(key)
}

/// Python's `randrange(n)` for `0 < n ≤ 2^32`: `getrandbits(k)` with rejection,
/// where `k = n.bit_length()`.
pub fn python_randrange(rng: &mut Mt, n: u32) -> u32 {
    if n <= 1 {
        return 0;
    }
    // Python: k = n.bit_length(); r = getrandbits(k) until r < n.
    let k = 32 - n.leading_zeros();
    loop {
        let r = rng.next_u32() >> (32 - k);
        if r < n {
            return r;
        }
    }
}

/// A question read after `id:` at the end of the prompt (causal reading).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClozeSlot {
    /// Question id.
    pub id: String,
    /// Tokens appended after the prompt: the encoding of `"<id>:"`.
    pub cue: Vec<TokenId>,
    /// How the options are scored: [`Scoring::FirstToken`] when every option has
    /// a first token of its own, else [`Scoring::Sequence`].
    pub scoring: Scoring,
    /// Per label, in label order. First-token scoring: the pooled candidate ids
    /// (first token of each of its [`surface_forms`], with and without a
    /// leading space; ids shared between labels removed), read from the one
    /// row after the cue. Sequence scoring: the whole continuation
    /// `" label\n"`, every token of which is scored.
    pub labels: Vec<Vec<TokenId>>,
    /// Sequence scoring only: per label, the other spellings of its
    /// continuation (`"label\n"` without the space, and the other
    /// [`surface_forms`]), each scored like the first and pooled with it by
    /// log-sum-exp. Empty for first-token scoring.
    pub variants: Vec<Vec<Vec<TokenId>>>,
}

/// The surface forms one label is read under, first the label as written
/// (trimmed). For word labels: also its lower-case form and its form with the
/// first letter capitalised (so `Pasta`, `pasta` and ` pasta` are the same
/// answer); for a boolean's `yes` / `no` also `true` / `false` (a model may
/// answer a yes/no question either way). Letters and digits have one form: a
/// lower-case `a` is the English article, not option A.
pub fn surface_forms(label: &str, words: bool, boolean: bool) -> Vec<String> {
    let t = label.trim();
    let mut forms = vec![t.to_owned()];
    let mut add = |f: String| {
        if !f.is_empty() && !forms.contains(&f) {
            forms.push(f);
        }
    };
    if words || boolean {
        let lower = t.to_lowercase();
        let mut chars = lower.chars();
        let cap = chars
            .next()
            .map(|c| c.to_uppercase().chain(chars).collect::<String>())
            .unwrap_or_default();
        add(lower);
        add(cap);
    }
    if boolean {
        match t.to_lowercase().as_str() {
            "yes" => ["true", "True"].into_iter().for_each(|f| add(f.to_owned())),
            "no" => ["false", "False"]
                .into_iter()
                .for_each(|f| add(f.to_owned())),
            _ => {}
        }
    }
    forms
}

/// Whether `labels` are `q`'s own option names (word labels), so their case
/// variants are the same answer.
fn are_words(q: &Question, labels: &[String]) -> bool {
    labels.len() == q.alternatives.len()
        && labels
            .iter()
            .zip(&q.alternatives)
            .all(|(l, a)| l.trim().to_lowercase() == a.name.trim().to_lowercase())
        && labels.iter().any(|l| l.trim().chars().count() > 1)
}

/// Resolve the cloze slot of `q` with `labels`.
///
/// When every label has a first token no other label starts with, the slot is
/// read from one row ([`Scoring::FirstToken`]). Otherwise (labels that share a
/// first token, such as `approve_all` / `approve_some` or the levels `20`…`24`
/// that Gemma spells digit by digit) each label is scored by the log-likelihood
/// of its whole continuation `" label\n"` ([`Scoring::Sequence`]); the closing
/// newline keeps a label that is a prefix of another (`card`, `card_arrival`)
/// from winning by being shorter. No label set is refused for how it tokenizes.
///
/// # Errors
/// [`CoreError::Schema`] only when two labels tokenize to the same continuation
/// (they cannot be told apart at all); [`CoreError::Tokenize`] if encoding fails.
pub fn resolve_cloze(
    tok: &dyn Tokenizer,
    q: &Question,
    qi: usize,
    labels: &[String],
) -> Result<ClozeSlot, CoreError> {
    let cue = tok.encode(&format!("{}:", q.id))?;
    let words = are_words(q, labels);
    let boolean = q.kind == crate::schema::QuestionKind::Boolean;
    let forms: Vec<Vec<String>> = labels
        .iter()
        .map(|l| surface_forms(l, words, boolean))
        .collect();
    if let Some(pooled) = first_token_labels(tok, &forms)? {
        return Ok(ClozeSlot {
            id: q.id.clone(),
            cue,
            scoring: Scoring::FirstToken,
            labels: pooled,
            variants: Vec::new(),
        });
    }
    let mut continuations: Vec<Vec<TokenId>> = Vec::with_capacity(labels.len());
    for (i, label) in labels.iter().enumerate() {
        let ids = tok.encode(&format!(" {}\n", label.trim()))?;
        if let Some(j) = continuations.iter().position(|c| *c == ids) {
            return Err(SchemaError::new(
                format!("questions[{qi}]"),
                format!(
                    "question '{}': labels '{}' and '{}' tokenize to the same tokens, so the model cannot tell them apart; rename one option",
                    q.id, labels[j], labels[i]
                ),
            )
            .into());
        }
        continuations.push(ids);
    }
    // Other spellings of each continuation; one that two labels share (or
    // that is another label's main continuation) belongs to neither.
    let mut spellings: Vec<Vec<Vec<TokenId>>> = Vec::with_capacity(labels.len());
    for (main, forms) in continuations.iter().zip(&forms) {
        let mut own: Vec<Vec<TokenId>> = Vec::new();
        for f in forms {
            for text in [format!(" {f}\n"), format!("{f}\n")] {
                let ids = tok.encode(&text)?;
                if ids != *main && !ids.is_empty() && !own.contains(&ids) {
                    own.push(ids);
                }
            }
        }
        spellings.push(own);
    }
    let variants = spellings
        .iter()
        .enumerate()
        .map(|(i, own)| {
            own.iter()
                .filter(|ids| {
                    !continuations.contains(ids)
                        && !spellings
                            .iter()
                            .enumerate()
                            .any(|(j, other)| j != i && other.contains(ids))
                })
                .cloned()
                .collect()
        })
        .collect();
    Ok(ClozeSlot {
        id: q.id.clone(),
        cue,
        scoring: Scoring::Sequence,
        labels: continuations,
        variants,
    })
}

/// Per label, the first-token ids no other label starts with (the label as
/// written, and each other surface form that is a single token, all with and
/// without a leading space); `None` when some label has none left.
fn first_token_labels(
    tok: &dyn Tokenizer,
    forms: &[Vec<String>],
) -> Result<Option<Vec<Vec<TokenId>>>, CoreError> {
    // `starts[i]`: every first token label i may begin with (any form, any
    // length), for the test that no other label begins the same way, so the
    // choice between first-token and sequence scoring does not depend on
    // how a label is cased. `read[i]`: the ids actually pooled: the label as
    // written counts by its first token (as before); another form only when
    // it is one whole token, so a form that starts with a common piece (`S`
    // of `Sql`) adds no unrelated mass.
    let mut starts: Vec<Vec<TokenId>> = Vec::with_capacity(forms.len());
    let mut read: Vec<Vec<TokenId>> = Vec::with_capacity(forms.len());
    for label_forms in forms {
        let (mut all, mut pooled) = (Vec::new(), Vec::new());
        for (f, form) in label_forms.iter().enumerate() {
            for text in [format!(" {form}"), form.clone()] {
                let ids = tok.encode(&text)?;
                let Some(&first) = ids.first() else { continue };
                if !all.contains(&first) {
                    all.push(first);
                }
                if (ids.len() == 1 || f == 0) && !pooled.contains(&first) {
                    pooled.push(first);
                }
            }
        }
        starts.push(all);
        read.push(pooled);
    }
    let mut out = Vec::with_capacity(forms.len());
    for (i, c) in read.iter().enumerate() {
        let own: Vec<TokenId> = c
            .iter()
            .copied()
            .filter(|id| {
                !starts
                    .iter()
                    .enumerate()
                    .any(|(j, other)| j != i && other.contains(id))
            })
            .collect();
        if own.is_empty() {
            return Ok(None);
        }
        out.push(own);
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests;
