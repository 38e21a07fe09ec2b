use serde_json::json;

use super::*;

fn slot(values: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": {
            "decision": {"type": "string", "enum": values},
            "confidence": {"type": "number"},
            "explanation": {"type": "string"},
        },
        "required": ["decision", "confidence", "explanation"],
        "additionalProperties": false,
    })
}

/// The cascade's schema shape for `(id, values)` slots, `required` in that order.
fn schema(slots: &[(&str, &[&str])]) -> Value {
    let mut props = Map::new();
    for (id, values) in slots {
        props.insert((*id).to_string(), slot(values));
    }
    let required: Vec<&str> = slots.iter().map(|(id, _)| *id).collect();
    json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
}

fn config_field(err: &Stage2Error) -> &str {
    match err {
        Stage2Error::Config {
            provider, field, ..
        } => {
            assert_eq!(provider, "gguf");
            field
        }
        other => panic!("expected a Config error, got {other:?}"),
    }
}

#[test]
fn keys_follow_required_order_and_values_are_the_enum() {
    let g = slot_grammar(
        &schema(&[("zeta", &["yes", "no"]), ("alpha", &["a", "b", "c"])]),
        200,
    )
    .expect("grammar");
    assert_eq!(g.slots, ["zeta", "alpha"]);
    let root = g.gbnf.lines().next().expect("root line");
    assert_eq!(
        root,
        r#"root ::= "{" ws "\"zeta\"" ws ":" ws slot0 ws "," ws "\"alpha\"" ws ":" ws slot1 ws "}""#
    );
    assert!(
        g.gbnf.contains(r#"decision0 ::= "\"yes\"" | "\"no\"""#),
        "{}",
        g.gbnf
    );
    assert!(g
        .gbnf
        .contains(r#"decision1 ::= "\"a\"" | "\"b\"" | "\"c\"""#));
    assert!(g.gbnf.contains(r#"slot1 ::= "{" ws "\"decision\"" ws ":" ws decision1 ws "," ws "\"confidence\"" ws ":" ws confidence ws "," ws "\"explanation\"" ws ":" ws explanation ws "}""#));
    assert!(g.gbnf.contains("echar{0,200}"));
    assert!(g
        .gbnf
        .contains(r#"confidence ::= "0." [0-9]{0,2} [1-9] | "1" ("." "0"{1,3})?"#));
}

#[test]
fn quotes_backslashes_and_controls_are_escaped_twice() {
    // JSON first (`"` → `\"`, `\` → `\\`), then GBNF (each `"`/`\` escaped again).
    let g = slot_grammar(
        &schema(&[(
            r#"id"q"#,
            &[r#"say "hi""#, r"back\slash", "tab\there", "café"],
        )]),
        10,
    )
    .expect("grammar");
    assert!(g.gbnf.contains(r#""\"id\\\"q\"""#), "{}", g.gbnf);
    assert!(g.gbnf.contains(r#""\"say \\\"hi\\\"\"""#), "{}", g.gbnf);
    assert!(g.gbnf.contains(r#""\"back\\\\slash\"""#), "{}", g.gbnf);
    assert!(g.gbnf.contains(r#""\"tab\\there\"""#), "{}", g.gbnf);
    assert!(g.gbnf.contains(r#""\"café\"""#), "{}", g.gbnf);
    assert!(g.gbnf.contains("echar{0,10}"));
    assert_eq!(gbnf_literal("a\"b\\c\nd\u{1}"), r#""a\"b\\c\nd\x01""#);
}

#[test]
fn schemas_of_another_shape_are_refused_naming_the_field() {
    let good = schema(&[("team", &["billing", "support"])]);
    let cases: Vec<(Value, &str)> = vec![
        (json!([1]), "response_schema"),
        (
            json!({"type": "array", "properties": {}, "required": []}),
            "response_schema.type",
        ),
        (
            {
                let mut s = good.clone();
                s["required"] = json!(["team", "other"]);
                s
            },
            "response_schema.required",
        ),
        (
            {
                let mut s = good.clone();
                s["required"] = json!([]);
                s
            },
            "response_schema.required",
        ),
        (
            {
                let mut s = good.clone();
                s["required"] = json!("team");
                s
            },
            "response_schema.required",
        ),
        (
            {
                let mut s = good.clone();
                s["additionalProperties"] = json!(true);
                s
            },
            "response_schema.additionalProperties",
        ),
        (
            {
                let mut s = good.clone();
                s["properties"]["team"]["properties"]["decision"]["enum"] = json!([]);
                s
            },
            "response_schema.properties.team.properties.decision.enum",
        ),
        (
            {
                let mut s = good.clone();
                s["properties"]["team"]["properties"]["decision"]["enum"] = json!(["a", 1]);
                s
            },
            "response_schema.properties.team.properties.decision.enum",
        ),
        (
            {
                let mut s = good.clone();
                s["properties"]["team"]["properties"]["confidence"]["type"] = json!("string");
                s
            },
            "response_schema.properties.team.properties.confidence.type",
        ),
        (
            {
                let mut s = good.clone();
                s["properties"]["team"]["properties"]["extra"] = json!({"type": "string"});
                s["properties"]["team"]["required"] =
                    json!(["decision", "confidence", "explanation", "extra"]);
                s
            },
            "response_schema.properties.team.properties",
        ),
        (
            {
                let mut s = good.clone();
                s["properties"]["team"] = json!("nope");
                s
            },
            "response_schema.properties.team",
        ),
    ];
    for (s, field) in cases {
        let err = slot_grammar(&s, 200).expect_err("another shape");
        assert_eq!(config_field(&err), field, "{err}");
        assert!(
            err.to_string()
                .starts_with(&format!("gguf: `{field}` must be ")),
            "{err}"
        );
    }
    let err = slot_grammar(&good, 0).expect_err("zero-length explanation");
    assert_eq!(config_field(&err), "max_explanation_chars");
    slot_grammar(&good, MAX_EXPLANATION_CHARS).expect("largest bound");
}
