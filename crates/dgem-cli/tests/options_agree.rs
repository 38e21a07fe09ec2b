//! Issue 30 item 2: the OpenAPI document, the MCP tool schemas and the
//! request parser accept the same options. The OpenAPI document advertised
//! `cascade_mode` `self`/`stage2`, a `cascade_threshold_mode` of
//! `hesitation`/`confidence` and a boolean `stage2_prior`, values the
//! parser refuses; a client that followed the document got a 400. Now every
//! enumerated value either document lists is the parser's canonical list,
//! each is accepted, and the values the document used to list are refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use dgem_cascade::options::{CascadeSwitch, PriorMode, ThresholdMode};
use dgem_core::schema::{Isolate, Layout};
use dgem_core::words::{names, Word};
use serde_json::{json, Map, Value};

/// `root` with every `$ref` into `#/components/schemas/` or `#/$defs/`
/// followed once (the documents reference their enums).
fn resolve<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let path = r.trim_start_matches('#');
            doc.pointer(path)
                .unwrap_or_else(|| panic!("dangling $ref {r}"))
        }
        None => v,
    }
}

/// The enum values a property schema lists, through `$ref`, `oneOf`/`anyOf`
/// (nullable wrappers) and `allOf`, sorted.
fn enum_values(doc: &Value, prop: &Value) -> Vec<String> {
    let prop = resolve(doc, prop);
    let mut out: Vec<String> = prop
        .get("enum")
        .and_then(Value::as_array)
        .map(|e| {
            e.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    out.extend(
        prop.get("const")
            .and_then(Value::as_str)
            .map(str::to_string),
    );
    for key in ["oneOf", "anyOf", "allOf"] {
        for branch in prop
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            out.extend(enum_values(doc, branch));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Property `key` of `schema`, through `$ref` and the parts of an `allOf`
/// (`DecisionRequest` flattens `AfterOptions`, which utoipa writes as an
/// `allOf` of a reference and the struct's own properties). `Null` when absent.
fn property<'a>(doc: &'a Value, schema: &'a Value, key: &str) -> &'a Value {
    let schema = resolve(doc, schema);
    if let Some(p) = schema.get("properties").and_then(|p| p.get(key)) {
        return p;
    }
    for part in schema
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let p = property(doc, part, key);
        if !p.is_null() {
            return p;
        }
    }
    &Value::Null
}

fn sorted<T: Word>() -> Vec<String> {
    let mut v: Vec<String> = names::<T>().iter().map(|s| (*s).to_string()).collect();
    v.sort();
    v
}

/// (option key, its canonical values: the type's one list).
fn enumerated() -> [(&'static str, Vec<String>); 5] {
    [
        ("cascade_mode", sorted::<CascadeSwitch>()),
        ("cascade_threshold_mode", sorted::<ThresholdMode>()),
        ("stage2_prior", sorted::<PriorMode>()),
        ("layout", sorted::<Layout>()),
        ("isolate", sorted::<Isolate>()),
    ]
}

/// Whether the request parse accepts `value` for `key`. It is the one
/// parse: the cascade reads its keys through the same typed options
/// (`AfterOptions`), so a cascade key is checked with a cascade switched on
/// as well, where the cascade reads it.
fn parser_accepts(key: &str, value: &Value) -> bool {
    let mut obj = Map::new();
    obj.insert(key.into(), value.clone());
    let service = dgem_service::DecisionRequest::from_object(&obj, &dgem_service::Surface::API);
    if !key.starts_with("cascade") && key != "stage2_prior" {
        return service.is_ok();
    }
    if key != "cascade_mode" {
        obj.insert("cascade_mode".into(), json!("entropy"));
    }
    let cascade = dgem_service::AfterOptions::from_object(&obj).map(|keys| keys.cascade());
    assert_eq!(
        service.is_ok(),
        cascade.is_ok(),
        "the request and the cascade disagree on {key}={value}"
    );
    cascade.is_ok()
}

#[test]
fn openapi_mcp_and_the_parser_list_the_same_cascade_values() {
    let openapi = dgem_server::openapi::document();
    let tools = dgem_mcp::tool_list();
    let decide_policy = tools
        .iter()
        .find(|t| t.name == dgem_mcp::DECIDE_POLICY)
        .expect("decide_policy tool");
    let mcp = Value::Object(decide_policy.input_schema.as_ref().clone());
    for (key, canonical) in enumerated() {
        for schema in ["ChatCompletionRequest", "DecisionRequest"] {
            let prop = property(&openapi, &openapi["components"]["schemas"][schema], key);
            if schema == "ChatCompletionRequest" && ["layout", "isolate"].contains(&key) {
                // The chat route takes them in its system schema, not the body.
                assert!(prop.is_null(), "{key}");
                continue;
            }
            assert_eq!(
                enum_values(&openapi, prop),
                canonical,
                "OpenAPI {schema}.{key}"
            );
        }
        let prop = &mcp["properties"][key];
        assert_eq!(
            enum_values(&mcp, prop),
            canonical,
            "MCP decide_policy.{key}"
        );
        for v in &canonical {
            assert!(
                parser_accepts(key, &json!(v)),
                "the parser refuses {key}={v}"
            );
        }
        assert!(!parser_accepts(key, &json!("sideways")), "{key}");
    }
}

/// `dgem decide --help` lists each word flag's values, from the same list.
#[test]
fn the_flags_list_the_same_values() {
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_dgem"))
        .args(["decide", "--help"])
        .output()
        .expect("run dgem decide --help");
    let help = String::from_utf8_lossy(&help.stdout).to_string();
    for (key, canonical) in enumerated() {
        let flag = if key == "cascade_mode" {
            "--cascade".to_string()
        } else {
            format!("--{}", key.replace('_', "-"))
        };
        let at = help.find(&format!("{flag} <")).expect("the flag");
        let rest = &help[at..];
        let listed = rest
            .find("[possible values: ")
            .map(|i| &rest[i + 18..])
            .and_then(|r| r.split(']').next())
            .expect("possible values");
        let mut listed: Vec<String> = listed.split(", ").map(str::to_string).collect();
        listed.sort();
        assert_eq!(listed, canonical, "{flag}");
    }
}

#[test]
fn values_the_openapi_document_used_to_advertise_are_refused_and_not_listed() {
    let openapi = dgem_server::openapi::document().to_string();
    for (key, value) in [
        ("cascade_mode", json!("self")),
        ("cascade_mode", json!("stage2")),
        ("cascade_threshold_mode", json!("confidence")),
        ("stage2_prior", json!(true)),
    ] {
        assert!(!parser_accepts(key, &value), "{key}={value} is accepted");
    }
    for stale in ["`self` or `stage2`", "`hesitation` or `confidence`"] {
        assert!(!openapi.contains(stale), "the document still says {stale}");
    }
}

/// The post-read option keys are the same on the chat route, `/api/decide`
/// and the MCP `decide_policy` tool.
#[test]
fn every_surface_takes_the_same_post_read_keys() {
    let post_read: Vec<&str> = dgem_server::chat::after_fields()
        .iter()
        .map(String::as_str)
        .collect();
    let tools = dgem_mcp::tool_list();
    let decide_policy = tools
        .iter()
        .find(|t| t.name == dgem_mcp::DECIDE_POLICY)
        .expect("decide_policy tool");
    let mcp_props = decide_policy.input_schema["properties"]
        .as_object()
        .expect("properties");
    for key in &post_read {
        if *key == "temperature_by_type" {
            // `/api` and MCP call it `temperature` (by type or one number).
            continue;
        }
        assert!(
            dgem_server::api::request::api_keys()
                .iter()
                .any(|k| k == key),
            "/api/decide lacks {key}"
        );
        assert!(
            mcp_props.contains_key(*key),
            "MCP decide_policy lacks {key}"
        );
    }
}

/// Issue 30 item 2, for every option rather than the enumerated three: each
/// key of the decision service's one request is a property of the OpenAPI
/// `DecisionRequest`, a property of an MCP decision tool (`backend` is added
/// per server as an enum), a key the `/api/decide` and MCP parsers take
/// (neither answers "not a field" / "unknown argument"), and, for the read and
/// post-read options, a `dgem decide` flag.
#[test]
fn every_request_option_is_documented_advertised_parsed_and_a_flag() {
    let keys = dgem_service::DecisionRequest::keys();
    assert!(keys.len() >= 22, "{keys:?}");
    let openapi = dgem_server::openapi::document();
    let documented = dgem_server::openapi::properties_of(&openapi, "DecisionRequest");
    let tools = dgem_mcp::tool_list();
    let advertised: Vec<String> = tools
        .iter()
        .filter(|t| t.name == dgem_mcp::DECIDE_POLICY || t.name == dgem_mcp::DECIDE_CUSTOM)
        .flat_map(|t| {
            t.input_schema["properties"]
                .as_object()
                .map(|p| p.keys().cloned().collect::<Vec<_>>())
                .unwrap_or_default()
        })
        .collect();
    let templates = dgem_engine::templates::TemplateDir::new("/nonexistent/dgem/templates");
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_dgem"))
        .args(["decide", "--help"])
        .output()
        .expect("run dgem decide --help");
    let help = String::from_utf8_lossy(&help.stdout).to_string();
    let flagged: Vec<String> = dgem_service::keys::properties::<dgem_service::ReadOptions>()
        .into_iter()
        .chain(dgem_service::AfterOptions::keys())
        .collect();
    for key in &keys {
        assert!(documented.contains(key), "OpenAPI lacks {key}");
        assert!(
            advertised.contains(key),
            "no MCP decision tool advertises {key}"
        );
        let mut body = Map::new();
        body.insert(key.clone(), Value::Null);
        let api = dgem_server::api::request::parse(
            &templates,
            None,
            &Value::Object(body.clone()),
            &Default::default(),
        );
        if let Err(e) = api {
            assert!(
                !e.to_string().contains("is not a field"),
                "/api refuses {key}: {e}"
            );
        }
        for tool in [dgem_mcp::DECIDE_POLICY, dgem_mcp::DECIDE_CUSTOM] {
            let advertised_here = tools
                .iter()
                .find(|t| t.name == tool)
                .is_some_and(|t| t.input_schema["properties"].get(key).is_some());
            if let Err(e) = dgem_mcp::parse_request(tool, Some(body.clone())) {
                let unknown = e.to_string().contains("unknown argument");
                assert_eq!(
                    unknown, !advertised_here,
                    "MCP {tool} parser and schema disagree on {key}: {e}"
                );
            }
        }
        if flagged.contains(key) {
            let flag = match key.as_str() {
                "cascade_mode" => "--cascade".to_string(),
                "expected_answers" => "--expect".to_string(),
                other => format!("--{}", other.replace('_', "-")),
            };
            assert!(
                help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}[")),
                "dgem decide has no {flag} for {key}"
            );
        }
    }
}
