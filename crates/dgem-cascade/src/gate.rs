//! The escalation gate: which Stage-1 answers go to Stage 2.
//!
//! Per answered slot (the original dgem cascade's rule): H is the answer's
//! entropy in nats (`aggregate.entropy`), K its number of alternatives (at
//! least 2) and H̃ = H / ln K its hesitation. The gate value is H in `nats`
//! mode and H̃ in `normalized` mode; the entropy gate escalates when it is at
//! or above the threshold. `on_miss` escalates a slot with an expected answer
//! exactly when Stage 1 missed it, and gates the other slots by entropy.
//! Reason strings are wire format and kept byte for byte.

use dgem_core::envelope::AnswerOut;

use crate::options::{CascadeMode, CascadeOptions, ThresholdMode};

/// The gate's verdict on one answered slot, with the Stage-1 reading it used.
#[derive(Debug, Clone, PartialEq)]
pub struct GateVerdict {
    /// Whether the slot goes to Stage 2.
    pub escalate: bool,
    /// Why, e.g. `entropy (H=0.4100 >= 0.35)`; empty when not escalated.
    pub reason: String,
    /// Stage-1 answer name.
    pub stage1_value: String,
    /// Stage-1 confidence of that answer, in [0, 1].
    pub stage1_confidence: f64,
    /// Stage-1 answer entropy H, nats.
    pub entropy: f64,
    /// H / ln K, in [0, 1] for a distribution over K alternatives.
    pub normalized_entropy: f64,
}

/// H / ln K for an entropy `h` in nats over `k` alternatives (K < 2 counts as 2).
pub fn normalized(h: f64, k: usize) -> f64 {
    h / (k.max(2) as f64).ln()
}

/// Gate one answered slot. `slot` is its question id (looked up in
/// `opts.expected` for `on_miss`). An answer that is not one pick (`multi`,
/// see `QuestionKind::picks_one`) never escalates: Stage 2 answers one
/// option per slot, and a set is not one option.
pub fn gate(slot: &str, answer: &AnswerOut, opts: &CascadeOptions) -> GateVerdict {
    let h = answer.aggregate.entropy;
    if !answer.question.kind.picks_one() {
        return GateVerdict {
            escalate: false,
            reason: String::new(),
            stage1_value: answer.selected_names().join(", "),
            stage1_confidence: answer.aggregate.confidence,
            entropy: h,
            normalized_entropy: answer.aggregate.normalized_entropy,
        };
    }
    let h_norm = normalized(h, answer.question.alternatives.len());
    let stage1 = answer.answer_name().to_string();
    let mut verdict = GateVerdict {
        escalate: false,
        reason: String::new(),
        stage1_value: stage1.clone(),
        stage1_confidence: answer.aggregate.confidence,
        entropy: h,
        normalized_entropy: h_norm,
    };
    if opts.mode == CascadeMode::OnMiss {
        if let Some(expected) = opts.expected.get(slot) {
            if !stage1.eq_ignore_ascii_case(expected) {
                verdict.escalate = true;
                verdict.reason =
                    format!("stage1_miss (dgemma=\"{stage1}\" != expected=\"{expected}\")");
            }
            return verdict;
        }
    }
    let (value, name) = match opts.threshold_mode {
        ThresholdMode::Nats => (h, "H"),
        ThresholdMode::Normalized => (h_norm, "H/lnK"),
    };
    if value >= opts.threshold {
        verdict.escalate = true;
        verdict.reason = format!("entropy ({name}={value:.4} >= {:.2})", opts.threshold);
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;
    use dgem_core::readout::aggregate;
    use dgem_core::schema::{SchemaDefaults, ValidSchema};
    use serde_json::json;

    fn answers(dist: Vec<f64>) -> AnswerOut {
        let k = dist.len();
        let options: Vec<String> = (0..k).map(|i| format!("o{i}")).collect();
        let s = ValidSchema::from_value(
            &json!({"questions": [{"id": "t", "type": "choice", "options": options}]}),
            &SchemaDefaults::default(),
        )
        .expect("valid");
        AnswerOut::new(s.questions[0].clone(), options, aggregate(&[dist]))
    }

    /// A two-way split whose entropy is `h` nats (bisection on p).
    fn with_entropy(h: f64) -> AnswerOut {
        let (mut lo, mut hi) = (0.5_f64, 1.0_f64);
        for _ in 0..200 {
            let p = (lo + hi) / 2.0;
            let e = -(p * p.ln() + (1.0 - p) * (1.0 - p).ln());
            if e > h {
                lo = p;
            } else {
                hi = p;
            }
        }
        let p = (lo + hi) / 2.0;
        answers(vec![p, 1.0 - p])
    }

    #[test]
    fn entropy_gate_in_nats() {
        let opts = CascadeOptions::entropy();
        let v = gate("t", &with_entropy(0.41), &opts);
        assert!(v.escalate);
        assert_eq!(v.reason, "entropy (H=0.4100 >= 0.35)");
        assert_eq!(v.stage1_value, "o0");
        assert!((v.normalized_entropy - 0.41 / 2f64.ln()).abs() < 1e-9);
        let calm = gate("t", &with_entropy(0.2), &opts);
        assert!(!calm.escalate);
        assert_eq!(calm.reason, "");
        // At the threshold itself the slot escalates (>=).
        assert!(gate("t", &with_entropy(0.35), &opts).escalate);
    }

    #[test]
    fn entropy_gate_normalized() {
        let mut opts = CascadeOptions::entropy();
        opts.threshold_mode = ThresholdMode::Normalized;
        opts.threshold = 0.16;
        // Four options: H̃ = H / ln 4.
        let a = answers(vec![0.91, 0.03, 0.03, 0.03]);
        let h = a.aggregate.entropy;
        let v = gate("t", &a, &opts);
        let expected = h / 4f64.ln();
        assert!(expected >= 0.16, "fixture must be hesitant: {expected}");
        assert!(v.escalate);
        assert_eq!(v.reason, format!("entropy (H/lnK={expected:.4} >= 0.16)"));
        let sure = answers(vec![0.99, 0.004, 0.003, 0.003]);
        assert!(!gate("t", &sure, &opts).escalate);
    }

    #[test]
    fn on_miss_with_and_without_expectation() {
        let mut opts = CascadeOptions::entropy();
        opts.mode = CascadeMode::OnMiss;
        opts.expected.insert("t".into(), "o1".into());
        let miss = gate("t", &answers(vec![0.99, 0.01]), &opts);
        assert!(miss.escalate);
        assert_eq!(
            miss.reason,
            "stage1_miss (dgemma=\"o0\" != expected=\"o1\")"
        );
        // A hit is not escalated, however hesitant.
        opts.expected.insert("t".into(), "O0".into());
        let hit = gate("t", &answers(vec![0.5, 0.5]), &opts);
        assert!(!hit.escalate);
        // No expectation for this slot: the entropy gate decides.
        let other = gate("u", &with_entropy(0.5), &opts);
        assert!(other.escalate);
        assert_eq!(other.reason, "entropy (H=0.5000 >= 0.35)");
    }
}
