#![allow(clippy::unwrap_used)]

use serde_json::{json, Value};

use super::*;

/// The answer to question `id` of `schema` whose most probable
/// alternative is `name` (probability 0.7, the rest shared).
fn answer(schema: &ValidSchema, id: &str, name: &str) -> AnswerOut {
    let q = schema.question(id).unwrap();
    let k = q.alternatives.len();
    let dist: Vec<f64> = q
        .alternatives
        .iter()
        .map(|a| {
            if a.name == name {
                0.7
            } else {
                0.3 / (k - 1) as f64
            }
        })
        .collect();
    let labels = q.alternatives.iter().map(|a| a.name.clone()).collect();
    AnswerOut::new(q.clone(), labels, dgem_core::readout::aggregate(&[dist]))
}

/// What `client.beta.chat.completions.parse(response_format=Ticket)` sends
/// for a Pydantic model with an `Enum` field, a `Literal`, a bool and a
/// bounded int.
fn pydantic_like() -> Value {
    json!({
        "model": "m",
        "messages": [
            {"role": "system", "content": "Sort the customer ticket."},
            {"role": "user", "content": "I was charged twice for one order."}
        ],
        "response_format": {"type": "json_schema", "json_schema": {
            "name": "Ticket", "strict": true,
            "schema": {
                "$defs": {"Team": {"enum": ["billing", "support", "engineering"], "title": "Team", "type": "string"}},
                "properties": {
                    "urgent": {"description": "Does it need someone today?", "title": "Urgent", "type": "boolean"},
                    "team": {"$ref": "#/$defs/Team", "description": "Which team owns it?"},
                    "channel": {"enum": ["email", "phone"], "title": "Channel", "type": "string"},
                    "priority": {"type": "integer", "minimum": 1, "maximum": 4},
                    "tier": {"enum": [1, 2, 3]}
                },
                "required": ["urgent", "team", "channel", "priority", "tier"],
                "title": "Ticket", "type": "object", "additionalProperties": false
            }
        }}
    })
}

fn err(req: &Value) -> ApiError {
    parse(req, &SchemaDefaults::default()).unwrap_err()
}

fn with_property(schema: Value) -> Value {
    let mut req = pydantic_like();
    req["response_format"]["json_schema"]["schema"]["properties"]["bad"] = schema;
    req
}

#[test]
fn a_pydantic_schema_becomes_one_question_per_property() {
    let r = parse(&pydantic_like(), &SchemaDefaults::default()).unwrap();
    let qs = &r.schema.questions;
    let ids: Vec<&str> = qs.iter().map(|q| q.id.as_str()).collect();
    assert_eq!(ids, ["urgent", "team", "channel", "priority", "tier"]);
    let names =
        |i: usize| -> Vec<String> { qs[i].alternatives.iter().map(|a| a.name.clone()).collect() };
    assert_eq!(names(0), ["yes", "no"]);
    assert_eq!(names(1), ["billing", "support", "engineering"]);
    assert_eq!(names(3), ["1", "2", "3", "4"]);
    assert_eq!(names(4), ["1", "2", "3"]);
    assert_eq!(qs[0].instructions, "Does it need someone today?");
    // The property's description wins over its `$defs` entry's title.
    assert_eq!(qs[1].instructions, "Which team owns it?");
    assert_eq!(qs[2].instructions, "Channel");
    assert_eq!(
        r.schema.instructions.as_deref(),
        Some("Sort the customer ticket.")
    );
    assert_eq!(r.state, json!("I was charged twice for one order."));
}

#[test]
fn the_reply_object_has_the_schema_shape_and_types() {
    let r = parse(&pydantic_like(), &SchemaDefaults::default()).unwrap();
    let mut answers = IndexMap::new();
    answers.insert("urgent".into(), Some(answer(&r.schema, "urgent", "yes")));
    answers.insert("team".into(), Some(answer(&r.schema, "team", "support")));
    let mut channel = answer(&r.schema, "channel", "phone");
    channel.abstained = Some("hesitation 0.99 >= 0.50".into());
    answers.insert("channel".into(), Some(channel));
    answers.insert("priority".into(), Some(answer(&r.schema, "priority", "3")));
    answers.insert("tier".into(), Some(answer(&r.schema, "tier", "2")));
    let obj = r.output.reply_object(&answers);
    assert_eq!(
        obj.to_string(),
        r#"{"urgent":true,"team":"support","channel":null,"priority":3,"tier":2}"#
    );
    // A skipped question (`None`) and one missing from the answers are null.
    answers.insert("team".into(), None);
    answers.shift_remove("tier");
    assert_eq!(
        r.output.reply_object(&answers).to_string(),
        r#"{"urgent":true,"team":null,"channel":null,"priority":3,"tier":null}"#
    );
}

#[test]
fn fields_that_are_not_decisions_are_refused_naming_the_property() {
    let cases = [
        (json!({"type": "string"}), "free text"),
        (json!({"type": "number"}), "real number"),
        (json!({"type": "object", "properties": {}}), "nested object"),
        (
            json!({"type": "array", "items": {"type": "boolean"}}),
            "an array of anything but enum values",
        ),
        (json!({"type": "array"}), "needs `items`"),
        (
            json!({"anyOf": [{"type": "boolean"}, {"type": "null"}]}),
            "nullable",
        ),
        (json!({"type": ["boolean", "null"]}), "one type"),
        (
            json!({"type": "integer", "minimum": 1}),
            "both `minimum` and `maximum`",
        ),
        (
            json!({"type": "integer", "minimum": 0, "maximum": 100}),
            "2 to 26 values",
        ),
        (json!({"const": "x"}), "one value"),
        (json!({"$ref": "#/$defs/Nope"}), "does not name an entry"),
    ];
    for (schema, words) in cases {
        let e = err(&with_property(schema.clone()));
        let body = e.body();
        let param = body["error"]["param"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            param.starts_with("response_format.json_schema.schema.properties.bad"),
            "{schema}: {param}"
        );
        let msg = body["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(words), "{schema}: {msg}");
        assert!(msg.contains("properties.bad"), "{schema}: {msg}");
    }
}

#[test]
fn an_enum_of_one_value_is_refused_at_its_enum() {
    let e = err(&with_property(json!({"enum": ["only"]})));
    let body = e.body();
    assert_eq!(
        body["error"]["param"],
        "response_format.json_schema.schema.properties.bad.enum"
    );
}

#[test]
fn json_object_and_unknown_types_are_refused() {
    assert!(wants_schema(Some(&json!({"type": "json_schema"}))).unwrap());
    assert!(!wants_schema(Some(&json!({"type": "text"}))).unwrap());
    assert!(!wants_schema(None).unwrap());
    let e = wants_schema(Some(&json!({"type": "json_object"}))).unwrap_err();
    assert_eq!(e.body()["error"]["param"], "response_format.type");
    let e = wants_schema(Some(&json!({"type": "yaml"}))).unwrap_err();
    assert!(e.body()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("[json_schema, text]"));
    let e = wants_schema(Some(&json!("json"))).unwrap_err();
    assert_eq!(e.body()["error"]["param"], "response_format");
}

#[test]
fn a_conversation_is_the_state_one_turn_per_paragraph() {
    let mut req = pydantic_like();
    req["messages"] = json!([
        {"role": "developer", "content": "Judge the last reply."},
        {"role": "user", "content": "Where is my parcel?"},
        {"role": "assistant", "content": [{"type": "text", "text": "It left today."}]}
    ]);
    let r = parse(&req, &SchemaDefaults::default()).unwrap();
    assert_eq!(
        r.state,
        json!("user: Where is my parcel?\n\nassistant: It left today.")
    );
    assert_eq!(
        r.schema.instructions.as_deref(),
        Some("Judge the last reply.")
    );
}

#[test]
fn a_missing_user_message_or_empty_state_is_refused() {
    let mut req = pydantic_like();
    req["messages"] = json!([{"role": "system", "content": "Sort it."}]);
    assert_eq!(err(&req).body()["error"]["param"], "messages");
    req["messages"] = json!([{"role": "user", "content": "   "}]);
    assert_eq!(err(&req).body()["error"]["param"], "messages");
    req["messages"] = json!([{"role": "tool", "content": "x"}]);
    assert_eq!(err(&req).body()["error"]["param"], "messages[0].role");
}

#[test]
fn a_property_name_that_is_not_an_id_is_refused_at_the_property() {
    let mut req = pydantic_like();
    req["response_format"]["json_schema"]["schema"]["properties"]["has space"] =
        json!({"type": "boolean"});
    let body = err(&req).body();
    assert_eq!(
        body["error"]["param"],
        "response_format.json_schema.schema.properties.has space"
    );
}

/// An array of enum values (Pydantic's `list[Tag]`) is a `multi` question;
/// its reply is the selected values with their JSON types.
#[test]
fn an_array_of_enum_values_reads_as_multi_select() {
    let mut req = pydantic_like();
    let schema = &mut req["response_format"]["json_schema"]["schema"];
    schema["$defs"]["Tag"] = json!({"enum": ["refund", "outage", 3], "type": "string"});
    schema["properties"]["tags"] = json!({"type": "array", "items": {"$ref": "#/$defs/Tag"},
        "maxItems": 2, "description": "Which topics does it raise?"});
    let r = parse(&req, &SchemaDefaults::default()).unwrap();
    let q = r.schema.question("tags").unwrap();
    assert_eq!(q.kind, dgem_core::schema::QuestionKind::Multi);
    assert_eq!(q.alternatives.len(), 3);
    assert_eq!(q.select.unwrap().max, 2);
    assert_eq!(q.instructions, "Which topics does it raise?");
    // refund and 3 apply (at or above the 0.5 threshold), outage does not.
    let tags = dgem_core::multi::collapse_probabilities(q, &[0.9, 0.2, 0.6]);
    let answers = IndexMap::from([("tags".to_owned(), Some(tags))]);
    assert_eq!(
        r.output.reply_object(&answers)["tags"],
        json!(["refund", 3])
    );
    // A count the values cannot meet is refused at `maxItems`.
    req["response_format"]["json_schema"]["schema"]["properties"]["tags"]["maxItems"] = json!(9);
    let body = err(&req).body();
    assert_eq!(
        body["error"]["param"],
        "response_format.json_schema.schema.properties.tags.maxItems"
    );
}
