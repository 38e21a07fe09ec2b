//! Turning a decision into the tool result: structured content plus a
//! plain-text summary.

use std::fmt::Write as _;

use dgem_engine::Decision;
use serde_json::{json, Value};

/// The structured content and text summary of one decision.
#[derive(Debug, Clone)]
pub struct DecisionReport {
    /// Structured content: `{template, answers, max_normalized_entropy,
    /// most_hesitant_question, elapsed_ms, diagnostics}`.
    pub structured: Value,
    /// One line per question plus the maximum hesitation.
    pub text: String,
}

/// Build the report of `decision` made from `template` in `elapsed_ms`.
pub fn report(template: &str, decision: &Decision, elapsed_ms: f64) -> DecisionReport {
    let answers = decision.answers_json();
    let diagnostics = decision.diagnostics_json();
    let mut text = format!("Decision ({template}), {elapsed_ms:.0} ms:\n");
    let mut max_h: f64 = 0.0;
    let mut most_hesitant = String::new();
    // Rendered from the typed answers, not read back out of their JSON.
    for (id, a) in &decision.answers {
        let Some(a) = a else {
            let _ = writeln!(text, "- {id}: skipped (its ask_if condition was not met)");
            continue;
        };
        let h = a.aggregate.normalized_entropy;
        if most_hesitant.is_empty() || h > max_h {
            max_h = h;
            most_hesitant = id.clone();
        }
        let answer = answer_text(a);
        let conf = a.aggregate.confidence;
        let probs = a
            .question
            .alternatives
            .iter()
            .zip(&a.aggregate.mean)
            .map(|(alt, p)| format!("{} {p:.3}", alt.name))
            .collect::<Vec<_>>()
            .join(", ");
        let mut notes = String::new();
        if a.multi.is_some() {
            // Each option's probability is its own; confidence is the set's.
            let _ = write!(notes, "; probabilities are each option's p(applies)");
        }
        if let Some(x) = a.constrained {
            let _ = write!(
                notes,
                "; constrained by the policy's rules (removed {x:.3})"
            );
        }
        if let Some(r) = &a.resolved {
            let _ = write!(notes, "; answered by stage 2 ({})", r.model);
        }
        if let Some(r) = &a.abstained {
            let _ = write!(notes, "; ABSTAINED: {r}, do not act on this answer");
        }
        let _ = writeln!(
            text,
            "- {id}: {answer} (confidence {conf:.3}; probabilities: {probs}; hesitation {h:.3}{notes})"
        );
    }
    let _ = write!(
        text,
        "Maximum hesitation (normalized entropy): {max_h:.3}{}",
        if most_hesitant.is_empty() {
            String::new()
        } else {
            format!(" on `{most_hesitant}`")
        }
    );
    // What was asked and not done (a thought a backend could not write).
    for w in &decision.diagnostics.warnings {
        let _ = write!(text, "\nWarning: {w}");
    }
    // What the model is, in plain words, as the CLI's table ends with it.
    if let Some(note) = decision
        .diagnostics
        .note
        .as_deref()
        .filter(|n| !n.is_empty())
    {
        let _ = write!(text, "\nNote: {note}");
    }
    let structured = json!({
        "template": template,
        "answers": answers,
        "max_normalized_entropy": max_h,
        "most_hesitant_question": most_hesitant,
        "elapsed_ms": elapsed_ms,
        "diagnostics": diagnostics,
    });
    DecisionReport { structured, text }
}

/// The answer in words: the chosen alternative's name (after a Stage-2
/// write-back, Stage 2's), or a multi answer's selected options joined by
/// ` + ` (`none selected` when it selected none).
fn answer_text(a: &dgem_core::envelope::AnswerOut) -> String {
    if a.multi.is_none() {
        return a.answer_name().to_string();
    }
    let names = a.selected_names();
    if names.is_empty() {
        "none selected".to_string()
    } else {
        names.join(" + ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 36: the MCP text summary carries the model's plain-words note,
    /// as the CLI's table does (it was in the structured content only).
    #[test]
    fn the_text_summary_carries_the_model_note() {
        let mut decision = Decision {
            answers: Default::default(),
            diagnostics: dgem_core::envelope::Diagnostics::default(),
        };
        assert!(!report("t", &decision, 1.0).text.contains("Note:"));
        decision.diagnostics.note = Some("a small model: expect low confidence".into());
        let r = report("t", &decision, 1.0);
        assert!(
            r.text
                .ends_with("\nNote: a small model: expect low confidence"),
            "{}",
            r.text
        );
    }

    /// Issue 40: a multi answer's line names the selected set and says its
    /// probabilities are each option's own; a constrained answer says so.
    #[test]
    fn the_text_summary_names_a_multi_set_and_a_constraint() {
        use dgem_core::schema::{SchemaDefaults, ValidSchema};
        let s = ValidSchema::from_value(
            &json!({"questions": [
                {"id": "tags", "type": "multi", "options": ["refund", "outage", "vip"]},
                {"id": "urgent", "type": "noul"}]}),
            &SchemaDefaults::default(),
        )
        .expect("valid");
        let tags = dgem_core::multi::collapse_probabilities(&s.questions[0], &[0.9, 0.2, 0.7]);
        let mut urgent = dgem_core::envelope::AnswerOut::new(
            s.questions[1].clone(),
            vec!["yes".into(), "no".into()],
            dgem_core::readout::aggregate(&[vec![0.6, 0.4]]),
        );
        urgent.constrained = Some(0.125);
        let decision = Decision {
            answers: [
                ("tags".to_string(), Some(tags)),
                ("urgent".to_string(), Some(urgent)),
            ]
            .into_iter()
            .collect(),
            diagnostics: dgem_core::envelope::Diagnostics::default(),
        };
        let text = report("t", &decision, 1.0).text;
        assert!(text.contains("- tags: refund + vip ("), "{text}");
        assert!(text.contains("each option's p(applies)"), "{text}");
        assert!(
            text.contains("constrained by the policy's rules (removed 0.125)"),
            "{text}"
        );
    }
}
