use super::*;
use crate::testutil::{answer, schema};
use serde_json::json;

fn prompt_for(prior: PriorMode) -> String {
    let s = schema();
    let team = answer(&s, "team", vec![0.6, 0.3, 0.1]);
    let urgent = answer(&s, "urgent", vec![0.55, 0.45]);
    let slots = [
        Escalated {
            answer: &team,
            reason: "entropy (H=0.8979 >= 0.35)",
        },
        Escalated {
            answer: &urgent,
            reason: "entropy (H=0.6881 >= 0.35)",
        },
    ];
    stage2_prompt(
        s.instructions.as_deref(),
        &json!({"subject": "refund", "body": "charged twice"}),
        0,
        &slots,
        prior,
    )
}

#[test]
fn every_prompt_has_guidance_state_and_questions() {
    for prior in [PriorMode::Soft, PriorMode::None, PriorMode::Full] {
        let p = prompt_for(prior);
        assert!(p.contains("Guidance:\nRoute support tickets.\n"), "{p}");
        // The state is written the way Stage 1 read it (Python-style JSON).
        assert!(
            p.contains("<<<\n{\"subject\": \"refund\", \"body\": \"charged twice\"}\n>>>"),
            "{p}"
        );
        assert!(
            p.contains(
                "- team (choice): Which team? Allowed values: billing (money), engineering, sales."
            ),
            "{p}"
        );
        assert!(
            p.contains(
                "- urgent (boolean): Is it urgent? Allowed values: yes (an outage), no (anything else)."
            ),
            "{p}"
        );
        assert!(p.contains("\"decision\""), "{p}");
        assert!(!p.contains("image(s)"), "{p}");
    }
}

#[test]
fn soft_prior_mentions_the_lean_only() {
    let p = prompt_for(PriorMode::Soft);
    assert!(p.contains("leaned toward \"billing\""), "{p}");
    assert!(p.contains("leaned toward \"yes\""), "{p}");
    assert!(p.contains("make your own decision"), "{p}");
    assert!(!p.contains('%'), "{p}");
    assert!(!p.contains("nats"), "{p}");
}

#[test]
fn no_prior_shows_nothing_of_stage_one() {
    let p = prompt_for(PriorMode::None);
    assert!(!p.contains("first-stage"), "{p}");
    assert!(!p.contains("First-stage"), "{p}");
    assert!(!p.contains("billing\""), "{p}");
}

#[test]
fn full_prior_shows_candidate_confidence_entropy_reason_and_distribution() {
    let p = prompt_for(PriorMode::Full);
    let h = -(0.6f64 * 0.6f64.ln() + 0.3 * 0.3f64.ln() + 0.1 * 0.1f64.ln());
    let want = format!(
        "First-stage candidate: \"billing\" (confidence 60.0%, entropy {h:.4} nats); \
         escalated because entropy (H=0.8979 >= 0.35). First-stage distribution: \
         billing 60.0%, engineering 30.0%, sales 10.0%."
    );
    assert!(p.contains(&want), "{p}\n---\n{want}");
    assert!(p.contains("distribution: yes 55.0%, no 45.0%."), "{p}");
}

#[test]
fn images_are_announced() {
    let s = schema();
    let team = answer(&s, "team", vec![0.5, 0.5, 0.0]);
    let slots = [Escalated {
        answer: &team,
        reason: "",
    }];
    let p = stage2_prompt(None, &json!("plain text"), 2, &slots, PriorMode::None);
    assert!(
        p.contains("<<<\nplain text\n>>>\nThe input also includes 2 image(s)"),
        "{p}"
    );
    assert!(!p.contains("Guidance"), "{p}");
}

#[test]
fn response_schema_lists_each_slot_with_its_enum() {
    let s = schema();
    let team = answer(&s, "team", vec![0.5, 0.3, 0.2]);
    let urgent = answer(&s, "urgent", vec![0.5, 0.5]);
    let sev = answer(&s, "sev", vec![0.3, 0.4, 0.3]);
    let slots: Vec<Escalated<'_>> = [&team, &urgent, &sev]
        .into_iter()
        .map(|answer| Escalated { answer, reason: "" })
        .collect();
    let schema = response_schema(&slots);
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], json!(["team", "urgent", "sev"]));
    assert_eq!(schema["additionalProperties"], false);
    let team = &schema["properties"]["team"];
    assert_eq!(
        team,
        &json!({
            "type": "object",
            "properties": {
                "decision": {"type": "string", "enum": ["billing", "engineering", "sales"]},
                "confidence": {"type": "number"},
                "explanation": {"type": "string"}
            },
            "required": ["decision", "confidence", "explanation"],
            "additionalProperties": false
        })
    );
    assert_eq!(
        schema["properties"]["urgent"]["properties"]["decision"]["enum"],
        json!(["yes", "no"])
    );
    assert_eq!(
        schema["properties"]["sev"]["properties"]["decision"]["enum"],
        json!(["low", "mid", "high"])
    );
}
