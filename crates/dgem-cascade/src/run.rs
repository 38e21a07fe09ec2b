//! The cascade itself: gate, ask Stage 2 once, check, write back.

use std::time::Instant;

use dgem_backend::Decision;
use dgem_core::envelope::AnswerOut;
use dgem_core::schema::ValidSchema;
use indexmap::IndexMap;
use serde_json::Value;
use tracing::Instrument as _;

use crate::gate::gate;
use crate::options::CascadeOptions;
use crate::prompt::{allowed_values, response_schema, stage2_prompt, Escalated};
use crate::provider::{Stage2, Stage2Reply, Stage2Request};
use crate::summary::{CascadeSummary, SlotSummary};

/// Confidence written back when Stage 2 gives none in (0, 1] (the original
/// cascade's fallback).
pub const FALLBACK_CONFIDENCE: f64 = 0.95;

/// Run the cascade over `decision`.
///
/// Every answered slot is gated ([`crate::gate::gate`]); skipped ones
/// (`None`) never are. When any slot escalates, one Stage-2 call answers all
/// of them within [`CascadeOptions::deadline_for`]. Each returned `decision`
/// must be one of the slot's allowed values (case and surrounding spaces
/// ignored; JSON `true`/`false` read as `yes`/`no`); a confidence outside
/// (0, 1] becomes [`FALLBACK_CONFIDENCE`]. Accepted answers are written back
/// with [`AnswerOut::resolve`], keeping the Stage-1 distribution, and clear any
/// abstention on that slot. A failed or late call changes no answer: its
/// message goes to [`CascadeSummary::error`].
pub async fn cascade(
    decision: &mut Decision,
    schema: &ValidSchema,
    state: &Value,
    images: &[String],
    opts: &CascadeOptions,
    provider: &dyn Stage2,
) -> CascadeSummary {
    let span = tracing::info_span!(
        "cascade",
        otel.name = "dgem.cascade",
        mode = opts.mode.as_str(),
        provider = provider.name(),
        escalated = tracing::field::Empty,
    );
    run(decision, schema, state, images, opts, provider, &span)
        .instrument(span.clone())
        .await
}

async fn run(
    decision: &mut Decision,
    schema: &ValidSchema,
    state: &Value,
    images: &[String],
    opts: &CascadeOptions,
    provider: &dyn Stage2,
    span: &tracing::Span,
) -> CascadeSummary {
    let mut slots = IndexMap::new();
    for (id, answer) in &decision.answers {
        let Some(answer) = answer else { continue };
        let v = gate(id, answer, opts);
        slots.insert(
            id.clone(),
            SlotSummary {
                question_id: id.clone(),
                escalated: v.escalate,
                reason: v.reason,
                stage1_value: v.stage1_value,
                stage1_confidence: v.stage1_confidence,
                stage1_entropy: v.entropy,
                stage1_normalized_entropy: v.normalized_entropy,
                stage2_value: None,
                stage2_confidence: None,
                explanation: None,
                error: None,
            },
        );
    }
    let escalated: Vec<String> = slots
        .values()
        .filter(|s| s.escalated)
        .map(|s| s.question_id.clone())
        .collect();
    span.record("escalated", escalated.len());
    let mut summary = CascadeSummary {
        mode: opts.mode,
        model: opts.model.clone(),
        threshold: opts.threshold,
        threshold_mode: opts.threshold_mode,
        triggered: !escalated.is_empty(),
        escalated_count: escalated.len(),
        total_slots: slots.len(),
        latency_ms: 0,
        prior: opts.prior,
        image_count: images.len(),
        error: String::new(),
        slots,
    };
    if escalated.is_empty() {
        return summary;
    }

    let picked: Vec<Escalated<'_>> = escalated
        .iter()
        .filter_map(|id| {
            let answer = decision.answers.get(id)?.as_ref()?;
            let reason = summary.slots.get(id).map_or("", |s| s.reason.as_str());
            Some(Escalated { answer, reason })
        })
        .collect();
    let deadline = opts.deadline_for(images.len());
    let req = Stage2Request {
        model: opts.model.clone(),
        prompt: stage2_prompt(
            schema.instructions.as_deref(),
            state,
            images.len(),
            &picked,
            opts.prior,
        ),
        response_schema: response_schema(&picked),
        images: images.to_vec(),
        timeout: deadline,
    };
    let started = Instant::now();
    let outcome = tokio::time::timeout(deadline, provider.resolve(&req)).await;
    summary.latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let reply = match outcome {
        Ok(Ok(reply)) => reply,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "stage-2 call failed; Stage-1 answers kept");
            summary.error = e.to_string();
            return summary;
        }
        Err(_) => {
            summary.error = format!(
                "stage-2 call timed out after {} ms (deadline)",
                deadline.as_millis()
            );
            tracing::warn!(error = %summary.error, "Stage-1 answers kept");
            return summary;
        }
    };
    summary.model = reply.model.clone();
    for id in &escalated {
        let (Some(Some(answer)), Some(entry)) =
            (decision.answers.get_mut(id), summary.slots.get_mut(id))
        else {
            continue;
        };
        match write_back(answer, id, &reply) {
            Ok(()) => {
                let r = answer.resolved.as_ref();
                entry.stage2_value = Some(answer.answer_name().to_string());
                entry.stage2_confidence = r.map(|r| r.confidence);
                entry.explanation = r.map(|r| r.explanation.clone());
            }
            Err(msg) => {
                tracing::warn!(slot = %id, error = %msg, "stage-2 answer not used");
                entry.error = Some(msg);
            }
        }
    }
    summary
}

/// Check slot `id` of `reply` and write it over `answer`.
///
/// # Errors
/// A message for the summary when the slot is missing, not an object, or its
/// `decision` is outside the allowed values.
fn write_back(answer: &mut AnswerOut, id: &str, reply: &Stage2Reply) -> Result<(), String> {
    let allowed = allowed_values(&answer.question);
    let Some(slot) = reply.slots.get(id) else {
        return Err("stage-2 gave no answer for this slot".into());
    };
    let Some(obj) = slot.as_object() else {
        return Err(format!("stage-2 answer must be an object, got {slot}"));
    };
    let given = match obj.get("decision") {
        Some(Value::String(s)) => s.trim().to_string(),
        Some(Value::Bool(true)) => "yes".into(),
        Some(Value::Bool(false)) => "no".into(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    let Some(index) = allowed.iter().position(|a| a.eq_ignore_ascii_case(&given)) else {
        return Err(format!(
            "stage-2 answered \"{given}\", allowed: [{}]",
            allowed.join(", ")
        ));
    };
    let confidence = obj
        .get("confidence")
        .and_then(Value::as_f64)
        .filter(|c| *c > 0.0 && *c <= 1.0)
        .unwrap_or(FALLBACK_CONFIDENCE);
    let explanation = obj
        .get("explanation")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim();
    answer.resolve(index, confidence, &reply.model, explanation);
    answer.abstained = None;
    Ok(())
}

#[cfg(test)]
mod tests;
