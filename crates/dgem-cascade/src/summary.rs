//! What the cascade did, in the original dgem's `cascade` diagnostics shape.

use indexmap::IndexMap;
use serde::Serialize;
use serde_json::Value;

use crate::options::{CascadeMode, PriorMode, ThresholdMode};

/// The cascade block of a decision's diagnostics.
///
/// Serializes to `{mode, model, threshold, threshold_mode, triggered,
/// escalated_count, total_slots, latency_ms, prior, image_count, error,
/// slots}` (the original dgem cascade's keys, in its order).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CascadeSummary {
    /// The gate (`entropy`, `on_miss`).
    pub mode: CascadeMode,
    /// The model that answered; the requested one when none did (may be empty).
    pub model: String,
    /// Threshold used: nats, or H/ln K (see `threshold_mode`).
    pub threshold: f64,
    /// What the threshold was compared with (`nats`, `normalized`).
    pub threshold_mode: ThresholdMode,
    /// Whether any slot was escalated (and Stage 2 therefore called).
    pub triggered: bool,
    /// Slots escalated.
    pub escalated_count: usize,
    /// Answered (not skipped) slots gated.
    pub total_slots: usize,
    /// Wall time of the Stage-2 call, ms (0 when not triggered).
    pub latency_ms: u64,
    /// Prior mode of the prompt (`soft`, `none`, `full`).
    pub prior: PriorMode,
    /// Images sent to Stage 2.
    pub image_count: usize,
    /// Why the Stage-2 call failed; empty when it did not (or was not made).
    pub error: String,
    /// Every answered slot, escalated or not, in decision order.
    pub slots: IndexMap<String, SlotSummary>,
}

/// One answered slot in the summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlotSummary {
    /// The question id.
    pub question_id: String,
    /// Whether the gate escalated it.
    pub escalated: bool,
    /// The gate's reason; empty when not escalated.
    pub reason: String,
    /// Stage-1 answer name.
    pub stage1_value: String,
    /// Stage-1 confidence, in [0, 1].
    pub stage1_confidence: f64,
    /// Stage-1 answer entropy H, nats.
    pub stage1_entropy: f64,
    /// Stage-1 H / ln K.
    pub stage1_normalized_entropy: f64,
    /// Stage-2 answer name, when one was written back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage2_value: Option<String>,
    /// Stage-2 confidence in (0, 1], when written back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage2_confidence: Option<f64>,
    /// Stage-2's one-line reason, when written back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explanation: Option<String>,
    /// Why an escalated slot's Stage-2 answer was not used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl CascadeSummary {
    /// Escalated slots that got no Stage-2 answer (call failed, slot missing or
    /// out of its allowed values): callers may abstain on these.
    pub fn failed_slots(&self) -> Vec<String> {
        self.slots
            .values()
            .filter(|s| s.escalated && s.stage2_value.is_none())
            .map(|s| s.question_id.clone())
            .collect()
    }

    /// Slots whose answer Stage 2 wrote back.
    pub fn resolved_slots(&self) -> Vec<String> {
        self.slots
            .values()
            .filter(|s| s.stage2_value.is_some())
            .map(|s| s.question_id.clone())
            .collect()
    }

    /// The summary as JSON (for diagnostics).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}
