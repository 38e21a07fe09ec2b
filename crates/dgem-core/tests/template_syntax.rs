//! Issue 12, defect 1: a template syntax error hung forever (`{{`, `{{ .x`,
//! `{{ end }}`, an unterminated string), each call leaking a spinning thread.
//! Every malformed template here must come back with an error, quickly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::mpsc;
use std::time::Duration;

use dgem_core::template::render;

/// Render `text` on another thread; `None` if it did not return in 5 s.
fn render_bounded(text: &str) -> Option<Result<String, String>> {
    let (tx, rx) = mpsc::channel();
    let text = text.to_string();
    std::thread::spawn(move || {
        let vars = serde_json::Map::new();
        let _ = tx.send(render("t", &text, &vars).map_err(|e| e.to_string()));
    });
    rx.recv_timeout(Duration::from_secs(5)).ok()
}

const MALFORMED: &[&str] = &[
    "{{",
    "{{ ",
    "{{ .x",
    "{{ .x }",
    "{{ end }}",
    "{{ else }}",
    "{{ if .x }}",
    "{{ if .x }}{{ else }}",
    "{{ range .x }}",
    "{{ \"abc",
    "{{ \"abc }}",
    "{{ 'a",
    "{{ `raw",
    "{{ (",
    "{{ ( .x",
    "{{ ) }}",
    "{{ $x",
    "{{ $x := }}",
    "{{ : }}",
    "{{/* comment",
    "{{/* comment */",
    "{{ 1.2.3 }}",
    "{{ 0x }}",
    "{{ .é",
    "{{ é",
    "{{ .x é }}",
    "text {{ .a | }}",
    "{{ template }}",
    "{{ define \"x\" }}",
    "{{ with }}",
    "{{- ",
    "{{ .x -",
    "{{ nil }}",
    "}}",
];

#[test]
fn every_malformed_template_returns_an_error_in_time() {
    let mut hung = Vec::new();
    let mut accepted = Vec::new();
    for text in MALFORMED {
        match render_bounded(text) {
            None => hung.push(*text),
            Some(Ok(out)) => accepted.push((*text, out)),
            Some(Err(e)) => assert!(e.contains("template"), "{text:?}: {e}"),
        }
    }
    assert!(hung.is_empty(), "hung: {hung:?}");
    // `}}` alone is text in Go templates too. gtmpl is laxer than Go on two
    // more (Go refuses both): a bare `0x` reads as 0 and a trailing `|` is
    // dropped. Everything else is an error.
    assert_eq!(
        accepted,
        vec![
            ("{{ 0x }}", "0".to_string()),
            ("text {{ .a | }}", "text <no value>".to_string()),
            ("}}", "}}".to_string()),
        ]
    );
}

/// Render `text` with `vars` on a thread with a 2 MiB stack (a tokio worker's
/// default), so a template deep enough to overflow a server thread aborts
/// this test instead of passing.
fn render_on_small_stack(text: String, vars: serde_json::Value) -> Result<String, String> {
    std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(move || {
            let vars = vars.as_object().cloned().unwrap_or_default();
            render("t", &text, &vars).map_err(|e| e.to_string())
        })
        .unwrap()
        .join()
        .unwrap()
}

fn nested_ifs(n: usize) -> String {
    format!("{}x{}", "{{ if true }}".repeat(n), "{{ end }}".repeat(n))
}

#[test]
fn thousand_nested_ifs_are_refused_not_a_stack_overflow() {
    let err = render_on_small_stack(nested_ifs(1000), serde_json::json!({})).unwrap_err();
    assert!(err.contains("nested more than 100 levels deep"), "{err}");
}

#[test]
fn thousand_nested_parentheses_are_refused_not_a_stack_overflow() {
    let text = format!("{{{{ {}1{} }}}}", "(".repeat(1000), ")".repeat(1000));
    let err = render_on_small_stack(text, serde_json::json!({})).unwrap_err();
    assert!(err.contains("nested more than 100 levels deep"), "{err}");
}

/// 16 templates calling each other in a chain, each `ifs` ifs deep around
/// its call, the last one writing `ok`.
fn chain_of_nested_templates(ifs: usize) -> String {
    let mut text = String::new();
    for i in 0..16 {
        let inner = if i == 15 {
            "ok".to_string()
        } else {
            format!("{{{{ template \"t{}\" . }}}}", i + 1)
        };
        text.push_str(&format!(
            "{{{{ define \"t{i}\" }}}}{}{inner}{}{{{{ end }}}}",
            "{{ if true }}".repeat(ifs),
            "{{ end }}".repeat(ifs)
        ));
    }
    text.push_str("{{ template \"t0\" . }}");
    text
}

#[test]
fn deepest_template_the_limits_allow_renders_on_a_small_stack() {
    // One template 98 ifs deep (its root list and the innermost action's
    // pipeline take the other two levels), and a chain of 16 templates
    // nested 99 lists deep in all: the worst cases the parser and the
    // executor accept.
    let one = render_on_small_stack(nested_ifs(98), serde_json::json!({})).unwrap();
    assert_eq!(one, "x");
    let chain = render_on_small_stack(chain_of_nested_templates(5), serde_json::json!({})).unwrap();
    assert_eq!(chain, "ok");
}

#[test]
fn templates_nested_past_the_limit_through_calls_are_refused_while_rendering() {
    // 16 × (7 ifs + the body) = 129 lists: each template parses, the chain
    // is refused when it runs.
    let err =
        render_on_small_stack(chain_of_nested_templates(7), serde_json::json!({})).unwrap_err();
    assert!(
        err.contains("nested more than 100 levels deep while rendering"),
        "{err}"
    );
}

#[test]
fn template_calls_past_the_depth_limit_are_refused() {
    let mut text = String::new();
    for i in 0..40 {
        text.push_str(&format!(
            "{{{{ define \"t{i}\" }}}}{{{{ template \"t{}\" . }}}}{{{{ end }}}}",
            i + 1
        ));
    }
    text.push_str("{{ define \"t40\" }}ok{{ end }}{{ template \"t0\" . }}");
    let err = render_on_small_stack(text, serde_json::json!({})).unwrap_err();
    assert!(err.contains("more than 16 deep"), "{err}");
}

#[test]
fn rendered_size_cap_stops_the_render_before_it_allocates() {
    // Issue 38: 100,000 items each indented by 10,000 spaces asked for ~1 GB
    // (3.9 GB at peak) before the 8 MiB cap was checked.
    let items: Vec<u32> = (0..100_000).collect();
    let text = "{{ range .items }}{{ indent 10000 \"x\" }}{{ end }}".to_string();
    let err = render_on_small_stack(text, serde_json::json!({ "items": items })).unwrap_err();
    assert!(
        err.contains("over 8388608 bytes, the most allowed"),
        "{err}"
    );
}

#[test]
fn nested_indents_are_refused_before_they_multiply() {
    let lines = "a\n".repeat(100_000);
    let text = "{{ indent 10000 (indent 10000 .x) }}".to_string();
    let err = render_on_small_stack(text, serde_json::json!({ "x": lines })).unwrap_err();
    assert!(err.contains("indent: the result would be"), "{err}");
}
