//! Golden snapshots of what the model is shown: the prompt of every policy in
//! `templates/`, and the DiffusionGemma-style letters canvas of `support_triage`
//! on the real Gemma tokenizer (serving.md §4.6–4.7).
#![allow(clippy::print_stderr)]

use std::path::PathBuf;

use dgem_core::labels::{labels_for, LabelMode};
use dgem_core::prompt::{gemma_chat_prompt, state_text, system_text, SystemTextSpec};
use dgem_core::schema::{Question, SchemaDefaults, ValidSchema};
use dgem_core::slots::{canvas_width, resolve_template, seed_canvas, CanvasTokens, TemplateSpec};
use dgem_core::tokenizer::Tokenizer;
use serde_json::{Map, Value};

mod common;

fn templates() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../templates");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("templates dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".json.tmpl"))
        .collect();
    v.sort();
    v
}

/// Every variable a template mentions (`.name` after `{{`), set to a sample string.
fn sample_vars(text: &str) -> Map<String, Value> {
    let mut vars = Map::new();
    for part in text.split("{{").skip(1) {
        let action = part.split("}}").next().unwrap_or("");
        for word in action.split(|c: char| c.is_whitespace() || c == '(' || c == ')') {
            if let Some(name) = word.strip_prefix('.') {
                if !name.is_empty()
                    && name.chars().all(|c| c.is_alphanumeric() || c == '_')
                    && name != "samples"
                {
                    vars.insert(
                        name.to_owned(),
                        Value::String(format!("sample {name} text")),
                    );
                }
            }
        }
    }
    vars
}

fn load(path: &PathBuf) -> (ValidSchema, Value) {
    let text = std::fs::read_to_string(path).expect("read template");
    let vars = sample_vars(&text);
    let name = path
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let rendered = dgem_core::template::render(&name, &text, &vars).expect("renders");
    let payload =
        dgem_core::payload::parse_named_payload(&name, &rendered, &vars).expect("payload");
    let schema =
        ValidSchema::from_value(&payload.schema, &SchemaDefaults::default()).expect("valid");
    dgem_core::stages::schedule(&schema).expect("schedules");
    (schema, payload.state)
}

#[test]
fn every_policy_renders_validates_and_prompts() {
    let all = templates();
    assert!(all.len() >= 6, "the six shipped policies are present");
    for path in all {
        let (schema, state) = load(&path);
        let qs: Vec<&Question> = schema.asked();
        let sys = system_text(&SystemTextSpec {
            questions: &qs,
            instructions: schema.instructions.as_deref(),
            format: schema.format,
            mode: LabelMode::Words,
            chunked: false,
            wording: None,
        });
        let prompt = gemma_chat_prompt(schema.layout, &sys, &state_text(&state));
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .replace(".json.tmpl", "");
        insta::assert_snapshot!(format!("prompt_{name}"), prompt);
    }
}

#[test]
fn letters_canvas_of_support_triage_on_gemma_tokens() {
    let Some(model) = common::model() else { return };
    let tok = dgem_backend_llama::LlamaTokenizer::load(&model).expect("tokenizer");
    let path = templates()
        .into_iter()
        .find(|p| p.ends_with("support_triage.json.tmpl"))
        .expect("support_triage");
    let (schema, _) = load(&path);
    let qs: Vec<&Question> = schema.asked();
    let labels: Vec<Vec<String>> = qs
        .iter()
        .map(|q| labels_for(q, LabelMode::Letters))
        .collect();
    let t = resolve_template(
        &tok,
        &TemplateSpec {
            questions: &qs,
            labels: &labels,
            head: &[],
            lead: "",
            format: schema.format,
            canvas_len: 128,
        },
    )
    .expect("every letter label is one Gemma token");
    let width = canvas_width(t.tokens.len(), 128, 16);
    let canvas = seed_canvas(
        &t,
        width,
        42,
        CanvasTokens {
            turn_close: 106,
            pad: 0,
            vocab: 262_144,
        },
    );
    let pieces: Vec<String> = t
        .tokens
        .iter()
        .map(|&id| format!("{id}:{:?}", tok.decode(&[id])))
        .collect();
    let slots: Vec<String> = t
        .slots
        .iter()
        .map(|s| format!("{} @ {} labels {:?}", s.id, s.pos, s.label_ids))
        .collect();
    insta::assert_snapshot!(
        "letters_canvas_support_triage",
        format!(
            "template:\n{}\nslots:\n{}\nwidth {width}\ncanvas (seed 42): {canvas:?}",
            pieces.join("\n"),
            slots.join("\n")
        )
    );
    // Slot positions hold random draws; everything else is the template, 106, then padding.
    for (i, &id) in canvas.iter().enumerate() {
        if t.slots.iter().any(|s| s.pos == i) {
            continue;
        }
        let want = t
            .tokens
            .get(i)
            .copied()
            .unwrap_or(if i == t.tokens.len() { 106 } else { 0 });
        assert_eq!(id, want, "position {i}");
    }
    assert_eq!(tok.vocab_size(), 262_144);
}
