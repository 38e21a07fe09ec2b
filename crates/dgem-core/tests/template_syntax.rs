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
