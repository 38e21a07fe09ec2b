//! Tests of schema validation: every message, asserted exactly.

use serde_json::{json, Value};

use crate::schema::*;

fn ok(v: Value) -> ValidSchema {
    ValidSchema::from_value(&v, &SchemaDefaults::default()).expect("valid schema")
}

/// Validate and return `(field, message)` of the error.
fn err(v: Value) -> (String, String) {
    let e = ValidSchema::from_value(&v, &SchemaDefaults::default()).expect_err("invalid schema");
    (e.field, e.message)
}

fn noul(id: &str) -> Value {
    json!({"id": id, "type": "noul"})
}

/// A valid two-question schema with `extra` top-level keys.
fn with(extra: Value) -> Value {
    let mut v = json!({"questions": [noul("a"), noul("b")]});
    if let (Value::Object(m), Value::Object(e)) = (&mut v, extra) {
        m.extend(e);
    }
    v
}

fn assert_err(v: Value, field: &str, message: &str) {
    assert_eq!(err(v), (field.to_string(), message.to_string()));
}

#[test]
fn full_schema_reads_every_field() {
    let s = ok(json!({
        "instructions": "Triage.",
        "questions": [
            {"id": "urgent", "type": "bool", "instructions": "Same day?", "criteria": {"true": "now", "false": null}},
            {"id": "team", "type": "choice", "options": [{"name": "billing", "description": "Charges"}, "support", 7]},
            {"id": "tone", "type": "score", "levels": ["calm", "mad"], "alone": true,
             "depends_on": ["urgent"], "ask_if": {"team": ["support"], "urgent": ["yes"]}}
        ],
        "samples": "4", "steps": 20, "think": 16, "ask": ["urgent", "team", "tone", "team"],
        "chunk_rows": 8, "chunk_prompt": "shared", "sequential": true, "layout": "schema_first",
        "isolate": "noul", "temperature": 0.5, "labels": "az", "seed_token": "fixed"
    }));
    assert_eq!(s.instructions.as_deref(), Some("Triage."));
    let q = &s.questions[0];
    assert_eq!(
        (q.id.as_str(), q.kind, q.instructions.as_str()),
        ("urgent", QuestionKind::Boolean, "Same day?")
    );
    assert_eq!(
        q.alternatives[0],
        Alternative {
            name: "yes".into(),
            description: Some("now".into())
        }
    );
    assert_eq!(
        q.alternatives[1],
        Alternative {
            name: "no".into(),
            description: None
        }
    );
    let names: Vec<&str> = s.questions[1]
        .alternatives
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    assert_eq!(names, ["billing", "support", "7"]);
    assert_eq!(
        s.questions[1].alternatives[0].description.as_deref(),
        Some("Charges")
    );
    let tone = &s.questions[2];
    assert_eq!(tone.depends_on, ["urgent", "team"]);
    assert_eq!(tone.ask_if.keys().collect::<Vec<_>>(), ["team", "urgent"]);
    assert_eq!(tone.alone, Some(true));
    assert_eq!(s.samples, SamplePolicy::Fixed { n: 4 });
    assert_eq!((s.steps, s.think, s.chunk_rows), (8, 16, Some(8)));
    assert_eq!(
        s.ask,
        Some(vec!["urgent".into(), "team".into(), "tone".into()])
    );
    assert_eq!(
        (s.chunk_prompt, s.sequential, s.layout),
        (ChunkPrompt::Shared, true, Layout::SchemaFirst)
    );
    assert_eq!(s.format, AnswerFormat::Lines);
}

#[test]
fn defaults() {
    let d = SchemaDefaults {
        samples: SamplePolicy::Auto {
            max: 4,
            threshold: 0.1,
        },
        layout: Layout::SchemaFirst,
        layout_stated: false,
        isolate: crate::schema::Isolate::None,
    };
    let s =
        ValidSchema::from_value(&with(json!({"samples": null, "steps": 0})), &d).expect("valid");
    assert_eq!(
        (s.samples, s.layout, s.steps, s.think),
        (d.samples, Layout::SchemaFirst, 1, 0)
    );
    // Left to the reader unless the policy, a request or the deployment says.
    assert!(!s.layout_stated);
    let stated =
        ValidSchema::from_value(&with(json!({"layout": "document_first"})), &d).expect("valid");
    assert!(stated.layout_stated);
    let by_deployment = SchemaDefaults {
        layout_stated: true,
        ..d
    };
    assert!(
        ValidSchema::from_value(&with(json!({})), &by_deployment)
            .expect("valid")
            .layout_stated
    );
    assert!(s.clone().with_layout(Layout::DocumentFirst).layout_stated);
    assert_eq!(
        (s.ask.clone(), s.chunk_rows, s.chunk_prompt, s.sequential),
        (None, None, ChunkPrompt::Own, false)
    );
    assert_eq!(s.instructions, None);
    let s = ok(with(json!({})));
    assert_eq!(
        (s.samples, s.layout),
        (SamplePolicy::Fixed { n: 1 }, Layout::DocumentFirst)
    );
}

#[test]
fn samples_policies() {
    let samples = |v: Value| ok(with(v)).samples;
    assert_eq!(
        samples(json!({"samples": "auto"})),
        SamplePolicy::Auto {
            max: 4,
            threshold: 0.1
        }
    );
    assert_eq!(
        samples(json!({"samples": "auto", "auto_max": 99, "auto_threshold": "0.3"})),
        SamplePolicy::Auto {
            max: 32,
            threshold: 0.3
        }
    );
    assert_eq!(
        samples(json!({"samples": "auto", "auto_max": "0"})),
        SamplePolicy::Auto {
            max: 1,
            threshold: 0.1
        }
    );
    assert_eq!(
        samples(json!({"samples": 100})),
        SamplePolicy::Fixed { n: 32 }
    );
    assert_eq!(
        samples(json!({"samples": " 2 "})),
        SamplePolicy::Fixed { n: 2 }
    );
    // auto_max is only read for "auto".
    assert_eq!(
        samples(json!({"samples": 3, "auto_max": "x"})),
        SamplePolicy::Fixed { n: 3 }
    );
}

#[test]
fn format_counts_all_questions() {
    let qs: Vec<Value> = (0..11).map(|i| noul(&format!("q{i}"))).collect();
    let s = ok(json!({"questions": qs, "ask": ["q0"]}));
    assert_eq!(s.format, AnswerFormat::Indexed);
}

#[test]
fn rule_1_and_2_question_list() {
    let m = "schema: needs a non-empty questions array";
    assert_err(
        json!([]),
        "questions",
        &format!("{m} (the schema is a list, not an object)"),
    );
    assert_err(
        json!({}),
        "questions",
        &format!("{m} (`questions` is missing)"),
    );
    assert_err(
        json!({"questions": []}),
        "questions",
        &format!("{m} (got an empty list)"),
    );
    assert_err(
        json!({"questions": "a"}),
        "questions",
        &format!("{m} (got a string)"),
    );
    let qs: Vec<Value> = (0..65).map(|i| noul(&format!("q{i}"))).collect();
    assert_err(
        json!({"questions": qs}),
        "questions",
        "schema: at most 64 questions (got 65)",
    );
}

#[test]
fn rule_3_ids() {
    assert_err(
        json!({"questions": ["a"]}),
        "questions[0]",
        "schema: questions[0] must be an object with an id and a type (got a string)",
    );
    assert_err(
        json!({"questions": [{"type": "noul"}]}),
        "questions[0].id",
        "question id '' must be non-empty, no ':' or newline",
    );
    assert_err(
        json!({"questions": [noul("a:b")]}),
        "questions[0].id",
        "question id 'a:b' must be non-empty, no ':' or newline",
    );
    assert_err(
        json!({"questions": [noul("a\nb")]}),
        "questions[0].id",
        "question id 'a\\nb' must be non-empty, no ':' or newline",
    );
    // Issue 12, defect 6: ids with spaces or over 100 characters were accepted.
    assert_err(
        json!({"questions": [noul("is urgent")]}),
        "questions[0].id",
        "question id 'is urgent' must have no spaces, other whitespace or invisible characters and at most 100 characters (got 9 characters); use snake_case, e.g. 'is_urgent'",
    );
    // Regression (bad-input suite): soft hyphen, a bidi override and an
    // invisible separator passed.
    for id in [
        "a\u{0}b",
        "a\u{200B}b",
        "a\u{FEFF}",
        "ur\u{00AD}gent",
        "a\u{202E}b",
        "a\u{2063}b",
    ] {
        let err = ValidSchema::from_value(
            &json!({"questions": [noul(id)]}),
            &SchemaDefaults::default(),
        )
        .expect_err("invisible characters refused");
        assert_eq!(err.field, "questions[0].id", "{id:?}");
    }
    let long = "x".repeat(101);
    let err = ValidSchema::from_value(
        &json!({"questions": [noul(&long)]}),
        &SchemaDefaults::default(),
    )
    .expect_err("refused");
    assert_eq!(err.field, "questions[0].id");
    assert!(
        err.message
            .contains("at most 100 characters (got 101 characters)"),
        "{}",
        err.message
    );
    assert!(
        ok(json!({"questions": [noul(&"y".repeat(100)), noul("b")]})).questions[0]
            .id
            .len()
            == 100
    );
    assert_err(
        json!({"questions": [{"id": ["x"], "type": "noul"}]}),
        "questions[0].id",
        "question id must be a string (got [\"x\"])",
    );
    // `" a"` was trimmed to a duplicate of `a`; it is now refused for its
    // space before any comparison (issue 38).
    assert_err(
        json!({"questions": [noul("a"), noul("b"), noul(" a")]}),
        "questions[2].id",
        "question id ' a' must not begin or end with whitespace; use 'a'",
    );
    assert_eq!(
        ok(json!({"questions": [{"id": 5, "type": "noul"}, noul("b")]})).questions[0].id,
        "5"
    );
}

#[test]
fn rule_3_types_and_alternatives() {
    assert_err(
        json!({"questions": [{"id": "a", "type": "banana"}]}),
        "questions[0].type",
        &format!(
            "question 'a': unknown type 'banana' (`type` must be one of {})",
            QuestionKind::accepted_names()
        ),
    );
    // A missing type: missing_type_says_it_is_missing.
    assert_err(
        json!({"questions": [{"id": "c", "type": "choice", "options": ["x"]}]}),
        "questions[0].options",
        "question 'c': needs at least two alternatives (got 1); `options` holds ['x']",
    );
    assert_err(
        json!({"questions": [{"id": "s", "type": "score"}]}),
        "questions[0].levels",
        "question 's': needs at least two alternatives (got 0); `levels` holds []",
    );
    // A choice holds up to 300 options (bracket routing); a score at most 26 levels.
    let many: Vec<String> = (0..30).map(|i| format!("o{i}")).collect();
    assert_eq!(
        ok(json!({"questions": [{"id": "pick", "type": "choice", "options": many}]})).questions[0]
            .alternatives
            .len(),
        30
    );
    assert_err(
        json!({"questions": [{"id": "lvl", "type": "score", "levels": many}]}),
        "questions[0].levels",
        "question 'lvl': at most 26 alternatives (got 30)",
    );
    let too_many: Vec<String> = (0..301).map(|i| format!("o{i}")).collect();
    assert_err(
        json!({"questions": [{"id": "pick", "type": "choice", "options": too_many}]}),
        "questions[0].options",
        "question 'pick': at most 300 alternatives (got 301; choices over 26 are answered through brackets)",
    );
    assert_err(
        json!({"questions": [{"id": "c", "type": "choice", "options": ["x", {"description": "d"}]}]}),
        "questions[0].options[1].name",
        "question 'c': options[1] needs a `name` (got {\"description\":\"d\"})",
    );
    assert_err(
        json!({"questions": [{"id": "c", "type": "choice", "options": "xy"}]}),
        "questions[0].options",
        "question 'c': options must be a list (got \"xy\")",
    );
    assert_err(
        json!({"questions": [{"id": "s", "type": "score", "levels": {"a": 1}}]}),
        "questions[0].levels",
        "question 's': levels must be a list (got {\"a\":1})",
    );
    assert_err(
        json!({"questions": [{"id": "b", "type": "noul", "criteria": ["x"]}]}),
        "questions[0].criteria",
        "question 'b': criteria must be an object {\"true\": …, \"false\": …} (got [\"x\"])",
    );
}

#[test]
fn rule_3_dependency_shapes() {
    let q = |extra: Value| {
        let mut q = noul("b");
        if let (Value::Object(m), Value::Object(e)) = (&mut q, extra) {
            m.extend(e);
        }
        json!({"questions": [noul("a"), q]})
    };
    assert_err(
        q(json!({"depends_on": "a"})),
        "questions[1].depends_on",
        "question 'b': depends_on must be a list of question ids (got \"a\")",
    );
    assert_err(
        q(json!({"depends_on": [1]})),
        "questions[1].depends_on",
        "question 'b': depends_on must be a list of question ids (got [1])",
    );
    assert_err(q(json!({"ask_if": {"a": []}})), "questions[1].ask_if",
        "question 'b': ask_if must map a question id to a non-empty list of its answers (got {\"a\":[]})");
    assert_err(q(json!({"ask_if": ["a"]})), "questions[1].ask_if",
        "question 'b': ask_if must map a question id to a non-empty list of its answers (got [\"a\"])");
    assert_err(
        q(json!({"alone": "yes"})),
        "questions[1].alone",
        "question 'b': alone must be true or false (got \"yes\")",
    );
}

#[test]
fn rule_4_isolate() {
    assert_eq!(ok(with(json!({"isolate": "all"}))).questions.len(), 2);
    assert_err(
        with(json!({"isolate": "some"})),
        "isolate",
        "schema: isolate must be \"auto\", \"noul\", \"none\" or \"all\" (got \"some\")",
    );
}

fn choice(id: &str) -> Value {
    json!({"id": id, "type": "choice", "options": ["x", "y"]})
}

#[test]
fn isolate_auto_reads_two_yes_no_questions_alone_in_small_schemas() {
    // Two booleans and a choice (3 questions): both booleans alone, flagged auto.
    let s = ok(json!({"questions": [noul("a"), noul("b"), choice("c")]}));
    assert_eq!(s.isolated(), vec!["a", "b"]);
    assert_eq!(s.isolate, Isolate::Auto);
    assert!(s.questions[0].alone_auto && s.questions[1].alone_auto);
    assert_eq!(s.questions[2].alone, None);
    // One boolean only: nothing isolated.
    assert!(ok(json!({"questions": [noul("a"), choice("c")]}))
        .isolated()
        .is_empty());
    // Four questions is above the auto limit of 3.
    let four = json!({"questions": [noul("a"), noul("b"), noul("c"), choice("d")]});
    assert!(ok(four).isolated().is_empty());
    // A single question is never isolated, even with "all".
    assert!(ok(json!({"questions": [noul("a")], "isolate": "all"}))
        .isolated()
        .is_empty());
}

#[test]
fn isolate_noul_all_none_and_explicit_alone_wins() {
    let qs = |iso: &str| {
        json!({"questions": [noul("a"), choice("b"), noul("c"), choice("d"),
            {"id": "e", "type": "noul", "alone": false}], "isolate": iso})
    };
    assert_eq!(ok(qs("noul")).isolated(), vec!["a", "c"]);
    assert_eq!(ok(qs("all")).isolated(), vec!["a", "b", "c", "d"]);
    assert!(ok(qs("none")).isolated().is_empty());
    assert!(ok(qs("all")).questions.iter().all(|q| !q.alone_auto));
    // Nine questions is above ISOLATE_MAX_QUESTIONS (8): "all" isolates nothing.
    let nine: Vec<Value> = (0..9).map(|i| noul(&format!("q{i}"))).collect();
    assert!(ok(json!({"questions": nine, "isolate": "all"}))
        .isolated()
        .is_empty());
    // An explicit alone: true is kept whatever the rule.
    let explicit = json!({"questions": [{"id": "a", "type": "noul", "alone": true}, choice("b")], "isolate": "none"});
    assert_eq!(ok(explicit).isolated(), vec!["a"]);
}

#[test]
fn isolate_default_comes_from_the_deployment_and_images_undo_auto() {
    let d = SchemaDefaults {
        isolate: Isolate::None,
        ..SchemaDefaults::default()
    };
    let v = json!({"questions": [noul("a"), noul("b")]});
    let s = ValidSchema::from_value(&v, &d).expect("valid");
    assert!(s.isolated().is_empty());
    let auto = ok(v).without_auto_isolation();
    assert!(auto.isolated().is_empty());
    let stated = ok(json!({"questions": [noul("a"), noul("b")], "isolate": "noul"}));
    assert_eq!(stated.without_auto_isolation().isolated(), vec!["a", "b"]);
}

#[test]
fn rule_5_to_7_dependencies() {
    let qs = |b: Value| json!({"questions": [noul("a"), b, {"id": "c", "type": "score", "levels": ["lo", "hi"]}]});
    assert_err(
        qs(json!({"id": "b", "type": "noul", "depends_on": ["zz"]})),
        "questions[1].depends_on",
        "question 'b': depends on unknown question 'zz' (known ids: a, b, c)",
    );
    assert_err(
        qs(json!({"id": "b", "type": "noul", "depends_on": ["b"]})),
        "questions[1].depends_on",
        "question 'b': depends on unknown question 'b' (a question cannot depend on itself)",
    );
    assert_err(
        qs(json!({"id": "b", "type": "noul", "ask_if": {"a": [true]}})),
        "questions[1].ask_if.a",
        "question 'b': ask_if values for 'a' must be among ['yes', 'no'] (got true)",
    );
    assert_err(
        qs(json!({"id": "b", "type": "noul", "ask_if": {"c": ["lo", "mid"]}})),
        "questions[1].ask_if.c",
        "question 'b': ask_if values for 'c' must be among ['lo', 'hi'] (got \"mid\")",
    );
    let cyc = json!({"questions": [
        {"id": "a", "type": "noul", "depends_on": ["c"]}, noul("free"),
        {"id": "b", "type": "noul", "ask_if": {"a": ["no"]}},
        {"id": "c", "type": "noul", "depends_on": ["b"]}]});
    assert_err(cyc, "questions", "schema: dependency cycle among a, b, c");
}

#[test]
fn rule_8_samples_errors() {
    let m = "schema: samples must be a positive count or \"auto\"";
    for (given, shown) in [
        (json!(-1), "-1"),
        (json!(0), "0"),
        (json!(true), "true"),
        (json!("many"), "\"many\""),
        (json!(2.5), "2.5"),
        (json!("0"), "\"0\""),
    ] {
        assert_err(
            with(json!({"samples": given})),
            "samples",
            &format!("{m} (got {shown})"),
        );
    }
    assert_err(
        with(json!({"samples": "auto", "auto_max": "lots"})),
        "auto_max",
        "schema: auto_max must be a whole number of reads, 1 to 32 (got \"lots\")",
    );
    assert_err(
        with(json!({"samples": "auto", "auto_max": null})),
        "auto_max",
        "schema: auto_max must be a whole number of reads, 1 to 32 (got null)",
    );
    assert_err(
        with(json!({"samples": "auto", "auto_threshold": "high"})),
        "auto_threshold",
        "schema: auto_threshold must be an entropy in nats, a number (got \"high\")",
    );
}

#[test]
fn rule_9_ask() {
    let dep = json!({"questions": [noul("a"), {"id": "b", "type": "noul", "depends_on": ["a"]}]});
    let ask = |a: Value| {
        let mut v = dep.clone();
        v["ask"] = a;
        v
    };
    let m = "schema: ask must list question ids from this schema";
    assert_err(ask(json!([])), "ask", &format!("{m} (got an empty list)"));
    assert_err(ask(json!("a")), "ask", &format!("{m} (got \"a\")"));
    assert_err(
        ask(json!(["a", "zz"])),
        "ask",
        &format!("{m} (unknown id \"zz\")"),
    );
    assert_err(
        ask(json!(["b"])),
        "ask",
        "schema: ask names 'b' but not everything it depends on (missing 'a')",
    );
    assert_eq!(
        ok(ask(json!(["b", "a"]))).ask,
        Some(vec!["b".to_string(), "a".to_string()])
    );
}

#[test]
fn rules_10_to_15_settings() {
    assert_err(
        with(json!({"chunk_rows": 4})),
        "chunk_rows",
        "schema: chunk_rows must be an integer of at least 8 (got 4)",
    );
    assert_err(
        with(json!({"chunk_rows": "16"})),
        "chunk_rows",
        "schema: chunk_rows must be an integer of at least 8 (got \"16\")",
    );
    assert_err(
        with(json!({"chunk_prompt": "all"})),
        "chunk_prompt",
        "schema: chunk_prompt must be \"shared\" or \"own\" (got \"all\")",
    );
    assert_err(
        with(json!({"sequential": "false"})),
        "sequential",
        "schema: sequential must be true or false (got \"false\")",
    );
    assert_err(
        with(json!({"layout": "sideways"})),
        "layout",
        "schema: layout must be \"schema_first\" or \"document_first\" (got \"sideways\")",
    );
    for (given, shown) in [
        (json!(5000), "5000"),
        (json!(-1), "-1"),
        (json!(true), "true"),
        (json!("8"), "\"8\""),
    ] {
        assert_err(
            with(json!({"think": given})),
            "think",
            &format!("schema: think must be a thought budget in tokens, 0 to 4096 (got {shown})"),
        );
    }
    assert_err(
        with(json!({"steps": "fast"})),
        "steps",
        "schema: steps must be a whole number of denoise steps, 1 to 8 (got \"fast\")",
    );
    assert_err(
        with(json!({"steps": null})),
        "steps",
        "schema: steps must be a whole number of denoise steps, 1 to 8 (got null)",
    );
    assert_eq!(ok(with(json!({"steps": "3"}))).steps, 3);
    assert_eq!(ok(with(json!({"steps": 2.9}))).steps, 2);
    assert!(ok(with(json!({"sequential": 1}))).sequential);
}

#[test]
fn first_error_wins_in_rule_order() {
    // A bad question comes before a bad top-level setting.
    assert_err(
        json!({"questions": [{"id": "a", "type": "x"}], "samples": -1}),
        "questions[0].type",
        &format!(
            "question 'a': unknown type 'x' (`type` must be one of {})",
            QuestionKind::accepted_names()
        ),
    );
    // isolate (rule 4) comes before unknown dependencies (rule 5).
    let v = json!({"questions": [{"id": "a", "type": "noul", "depends_on": ["z"]}], "isolate": 1});
    assert_eq!(err(v).0, "isolate");
}

#[test]
fn python_repr_quotes() {
    use super::text::{py_list, py_repr};
    assert_eq!(py_repr("it's"), "\"it's\"");
    assert_eq!(py_repr("a'\"b"), "'a\\'\"b'");
    assert_eq!(py_list(&["yes".into(), "no".into()]), "['yes', 'no']");
}

#[test]
fn duplicate_option_names_are_rejected() {
    // Regression: ["a", "a", "b"] was accepted and the answer's probabilities map
    // lost one entry (summing to 0.05).
    assert_err(
        json!({"questions": [{"id": "d", "type": "choice", "options": ["a", "a", "b"]}]}),
        "questions[0].options[1]",
        "question 'd': alternative names must be unique; 'a' appears at 0 and 1",
    );
    assert_err(
        json!({"questions": [{"id": "s", "type": "score", "levels": ["low", "high", "low"]}]}),
        "questions[0].levels[2]",
        "question 's': alternative names must be unique; 'low' appears at 0 and 2",
    );
}

#[test]
fn blank_or_multiline_option_names_are_rejected() {
    // Regression: "", "  " and "a\nb" were accepted; a newline rewrote the prompt.
    assert_err(
        json!({"questions": [{"id": "c", "type": "choice", "options": ["ok", "  "]}]}),
        "questions[0].options[1]",
        "question 'c': alternative 1 must be a non-empty name on one line (got '  ')",
    );
    assert_err(
        json!({"questions": [{"id": "c", "type": "choice", "options": ["a\nb", "c"]}]}),
        "questions[0].options[0]",
        "question 'c': alternative 0 must be a non-empty name on one line (got 'a\\nb')",
    );
}

#[test]
fn missing_type_says_it_is_missing() {
    assert_err(
        json!({"questions": [{"id": "a"}]}),
        "questions[0].type",
        &format!(
            "question 'a': unknown type 'None' (`type` is missing; it must be one of {})",
            QuestionKind::accepted_names()
        ),
    );
}

#[test]
fn option_names_that_look_alike_are_one_name() {
    // Issue 38: names differing only by trailing spaces, NFC/NFD or a
    // no-break space were accepted as distinct options.
    let (field, msg) = err(
        json!({"questions": [{"id": "t", "type": "choice", "options": ["billing", "billing "]}]}),
    );
    assert_eq!(field, "questions[0].options[1]");
    assert!(
        msg.contains("'billing' (at 0) and 'billing ' (at 1) are the same name once spaces are trimmed and Unicode is normalised (NFC)"),
        "{msg}"
    );
    let composed = "caf\u{e9}";
    let decomposed = "cafe\u{301}";
    let (field, _) = err(
        json!({"questions": [{"id": "t", "type": "choice", "options": [composed, decomposed]}]}),
    );
    assert_eq!(field, "questions[0].options[1]");
    let (field, _) = err(
        json!({"questions": [{"id": "t", "type": "choice", "options": ["new york", "new\u{a0}york"]}]}),
    );
    assert_eq!(field, "questions[0].options[1]");
}

#[test]
fn option_names_with_invisible_or_control_characters_are_refused() {
    for (bad, code) in [
        ("bil\u{200b}ling", "U+200B"),
        ("\u{202e}gnillib", "U+202E"),
        ("a\u{0}b", "U+0000"),
        ("a\tb", "U+0009"),
        ("\u{200b}", "U+200B"),
    ] {
        let (field, msg) =
            err(json!({"questions": [{"id": "t", "type": "choice", "options": ["support", bad]}]}));
        assert_eq!(field, "questions[0].options[1]", "{bad:?}");
        assert!(
            msg.contains("must have no invisible or control characters") && msg.contains(code),
            "{bad:?}: {msg}"
        );
    }
    // An inner plain space stays allowed.
    ok(json!({"questions": [{"id": "t", "type": "choice", "options": ["new york", "boston"]}]}));
}

#[test]
fn a_question_id_with_surrounding_spaces_is_refused_not_trimmed() {
    assert_err(
        json!({"questions": [{"id": " x ", "type": "boolean"}]}),
        "questions[0].id",
        "question id ' x ' must not begin or end with whitespace; use 'x'",
    );
}

/// A causal reader's rule (`ValidSchema::with_questions_apart`): every asked
/// question that does not state `alone` is read apart under `auto` with
/// `document_first` and under `all` at any count; not under `schema_first`
/// `auto`, `none`, a chained schema or `chunk_prompt: "shared"`.
#[test]
fn questions_are_read_apart_by_a_causal_reader_where_the_rule_says() {
    let choice = |id: &str| json!({"id": id, "type": "choice", "options": ["x", "y"]});
    let questions = |n: usize| (0..n).map(|i| choice(&format!("q{i}"))).collect::<Vec<_>>();
    let apart = |v: Value, chained: bool| ok(v).with_questions_apart(chained).isolated();
    let all12: Vec<String> = (0..12).map(|i| format!("q{i}")).collect();
    // `auto`, document_first (the default layout): any count, no canvas limit.
    assert_eq!(apart(json!({"questions": questions(12)}), false), all12);
    assert_eq!(apart(json!({"questions": questions(1)}), false), ["q0"]);
    // `all` under schema_first still reads apart; `auto` there keeps the
    // canvas rule (nothing for choices).
    let sf = |isolate: &str| json!({"questions": questions(3), "layout": "schema_first", "isolate": isolate});
    assert_eq!(apart(sf("all"), false), ["q0", "q1", "q2"]);
    assert!(apart(sf("auto"), false).is_empty());
    assert!(apart(sf("none"), false).is_empty());
    // `none` and `noul` (a choice is not yes/no) read nothing apart.
    assert!(apart(json!({"questions": questions(3), "isolate": "none"}), false).is_empty());
    assert!(apart(json!({"questions": questions(3), "isolate": "noul"}), false).is_empty());
    // Chained, or a shared chunk prompt: left as written.
    assert!(apart(json!({"questions": questions(3)}), true).is_empty());
    assert!(apart(
        json!({"questions": questions(3), "chunk_prompt": "shared"}),
        false
    )
    .is_empty());
    // An explicit `alone: false` wins; questions `ask` leaves out are not read.
    let mut qs = questions(3);
    qs[1]["alone"] = json!(false);
    assert_eq!(
        apart(json!({"questions": qs, "ask": ["q0", "q1"]}), false),
        ["q0"]
    );
    // Flagged as `auto`'s own under `auto`, not under `all`.
    let s = ok(json!({"questions": questions(2)})).with_questions_apart(false);
    assert!(s.questions.iter().all(|q| q.alone_auto));
    let s = ok(json!({"questions": questions(2), "isolate": "all"})).with_questions_apart(false);
    assert!(s.questions.iter().all(|q| q.is_alone() && !q.alone_auto));
}

/// Regression: a misspelt question key of a policy (`instrucions`,
/// `critera`, `treshold`) was ignored, so the question lost its text, its
/// options or a setting in silence; on the chat route, whose schema is a
/// policy, while `/api` and `/v1/systemone` refused the same typo (found by
/// a black-box run of `dgem serve`).
#[test]
fn a_misspelt_question_key_is_refused_naming_the_key_it_nearly_spells() {
    for (q, key, meant) in [
        (
            json!({"id": "a", "type": "noul", "instrucions": "Urgent?"}),
            "instrucions",
            "instructions",
        ),
        (
            json!({"id": "a", "type": "choice", "options": ["x", "y"], "critera": "z"}),
            "critera",
            "criteria",
        ),
        (
            json!({"id": "a", "type": "multi", "options": ["x", "y"], "treshold": 0.9}),
            "treshold",
            "threshold",
        ),
        (
            json!({"id": "a", "type": "score", "level": ["lo", "hi"]}),
            "level",
            "levels",
        ),
    ] {
        assert_err(
            json!({"questions": [q]}),
            &format!("questions[0].{key}"),
            &format!("question 'a': unknown key `{key}` (did you mean `{meant}`?)"),
        );
    }
    // A key that spells no question key is ignored, as the original server ignores it.
    let v = json!({"questions": [{"id": "a", "type": "noul", "note": "from the bot"}]});
    assert!(ValidSchema::from_value(&v, &SchemaDefaults::default()).is_ok());
}
