//! The wire form of a validated schema: [`ValidSchema::to_wire`] writes the
//! schema object (the `questions` list and the settings) that
//! [`ValidSchema::from_value`] reads, so a decision can be sent to another dgem
//! (a replica behind the gateway, a remote server) without keeping the caller's
//! raw JSON beside the validated type.
//!
//! The round trip is exact: `from_value(&s.to_wire(), &any_defaults) == s` for
//! every valid `s`, whatever deployment defaults the receiver applies, because
//! every setting is written out explicitly. `alone` is written only where the
//! question stated it or a non-`auto` isolation rule set it; a question isolated
//! by `isolate: "auto"` is left to the receiver's own `auto` resolution, which
//! gives the same answer and keeps its `alone_auto` flag.

use serde_json::{json, Map, Value};

use super::{SamplePolicy, ValidSchema};

impl ValidSchema {
    /// The schema object of this validated schema (see the module docs).
    pub fn to_wire(&self) -> Value {
        let questions: Vec<Value> = self.questions.iter().map(question_wire).collect();
        let mut out = Map::new();
        if let Some(i) = &self.instructions {
            out.insert("instructions".into(), json!(i));
        }
        out.insert("questions".into(), Value::Array(questions));
        match self.samples {
            SamplePolicy::Fixed { n } => {
                out.insert("samples".into(), json!(n));
            }
            SamplePolicy::Auto { max, threshold } => {
                out.insert("samples".into(), json!("auto"));
                out.insert("auto_max".into(), json!(max));
                out.insert("auto_threshold".into(), json!(threshold));
            }
        }
        out.insert("steps".into(), json!(self.steps));
        out.insert("think".into(), json!(self.think));
        // The dgem-rs switches go out only when set, so a peer that does not
        // know them sees the schema it always saw.
        if self.think_optional {
            out.insert("think_optional".into(), json!(true));
        }
        if self.requires_image {
            out.insert("requires_image".into(), json!(true));
        }
        if !self.rules.is_empty() {
            let rules: Vec<Value> = self
                .rules
                .0
                .iter()
                .map(crate::rules::Rule::to_wire)
                .collect();
            out.insert("rules".into(), Value::Array(rules));
        }
        if let Some(ask) = &self.ask {
            out.insert("ask".into(), json!(ask));
        }
        if let Some(rows) = self.chunk_rows {
            out.insert("chunk_rows".into(), json!(rows));
        }
        out.insert("chunk_prompt".into(), json!(self.chunk_prompt));
        out.insert("sequential".into(), json!(self.sequential));
        out.insert("layout".into(), json!(self.layout.as_str()));
        out.insert("isolate".into(), json!(self.isolate.as_str()));
        Value::Object(out)
    }
}

fn question_wire(q: &super::Question) -> Value {
    let mut m = Map::new();
    m.insert("id".into(), json!(q.id));
    m.insert("type".into(), json!(q.kind.as_str()));
    m.insert("instructions".into(), json!(q.instructions));
    crate::kinds::of(q.kind).wire(q, &mut m);
    if !q.depends_on.is_empty() {
        m.insert("depends_on".into(), json!(q.depends_on));
    }
    if !q.ask_if.is_empty() {
        m.insert("ask_if".into(), json!(q.ask_if));
    }
    if let (Some(alone), false) = (q.alone, q.alone_auto) {
        m.insert("alone".into(), json!(alone));
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::schema::{Isolate, Layout, SamplePolicy, SchemaDefaults, ValidSchema};

    fn round_trip(raw: serde_json::Value) -> ValidSchema {
        let defaults = SchemaDefaults::default();
        let s = ValidSchema::from_value(&raw, &defaults).expect("valid");
        let other = SchemaDefaults {
            samples: SamplePolicy::Fixed { n: 7 },
            layout: Layout::SchemaFirst,
            layout_stated: true,
            isolate: Isolate::All,
        };
        let back = ValidSchema::from_value(&s.to_wire(), &other).expect("wire form is valid");
        assert!(back.layout_stated, "the wire form states its layout");
        let mut stated = s.clone();
        stated.layout_stated = true;
        assert_eq!(back, stated, "wire form: {}", s.to_wire());
        s
    }

    #[test]
    fn every_field_survives_the_wire_form_under_other_defaults() {
        let s = round_trip(json!({
            "instructions": "Read the ticket.",
            "samples": "auto", "auto_max": 5, "auto_threshold": 0.25,
            "steps": 2, "think": 16, "think_optional": true, "requires_image": true,
            "chunk_rows": 12, "chunk_prompt": "shared",
            "sequential": true, "layout": "document_first",
            "questions": [
                {"id": "urgent", "type": "noul", "question": "Is it urgent?",
                 "criteria": {"true": "an outage", "false": "anything else"}},
                {"id": "team", "type": "choice", "depends_on": ["urgent"],
                 "options": [{"name": "billing", "description": "money"}, "tech", 3]},
                {"id": "sev", "type": "score", "levels": [1, 2, 3],
                 "ask_if": {"urgent": ["yes"]}, "alone": true},
            ],
            "ask": ["urgent", "sev"],
        }));
        assert_eq!(s.questions[1].alternatives[2].name, "3");
    }

    #[test]
    fn auto_isolation_is_resolved_again_and_keeps_its_flag() {
        let s = round_trip(json!({"questions": [
            {"id": "a", "type": "boolean"}, {"id": "b", "type": "boolean"},
        ]}));
        assert!(s
            .questions
            .iter()
            .all(|q| q.alone == Some(true) && q.alone_auto));
        let s = round_trip(json!({"isolate": "noul", "questions": [
            {"id": "a", "type": "boolean"}, {"id": "b", "type": "choice", "options": ["x", "y"]},
        ]}));
        assert_eq!(s.questions[0].alone, Some(true));
        assert!(!s.questions[0].alone_auto);
        let s = round_trip(json!({"isolate": "none", "questions": [
            {"id": "a", "type": "boolean", "alone": true}, {"id": "b", "type": "boolean"},
        ]}));
        assert_eq!(
            (s.questions[0].alone, s.questions[1].alone),
            (Some(true), None)
        );
    }
}
