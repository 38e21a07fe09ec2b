//! Rendering of `.json.tmpl` policies (reference.md §1.1–1.2).
//!
//! Policies are Go `text/template` files. The engine is the `gtmpl` crate; this
//! module only converts variables into gtmpl values and registers the helper
//! functions of the Go engine (`toJson`, `toPrettyJson`, `default`, `indent`,
//! `upper`, `lower`, `trim`) plus a Go-faithful `printf` (see `gofmt.rs`).
//!
//! ```
//! use dgem_core::template::render;
//! let mut vars = serde_json::Map::new();
//! vars.insert("ticket".into(), "Card \"declined\"".into());
//! let out = render("t", r#"{"t": {{ .ticket | toJson }}, "s": {{ default 1 .samples }}}"#, &vars)?;
//! assert_eq!(out, r#"{"t": "Card \"declined\"", "s": 1}"#);
//! # Ok::<(), dgem_core::TemplateError>(())
//! ```

mod gofmt;
mod unset;

use std::collections::HashMap;

use gtmpl::{Context, Func, FuncError, Template, Value};
use serde_json::Value as Json;

use crate::error::TemplateError;

pub use unset::{render_strict, unset_variables};

/// Render template `text` (named `name` in errors) with `vars` as the data map.
///
/// A variable that is missing renders as Go's `<no value>` (`null` through
/// `toJson`); guard it with `default`. JSON `null` variables behave the same
/// way (as a nil interface does in Go). This is the lenient render the
/// catalogue and the benchmarks use; a decision renders through
/// [`render_strict`], which refuses such a placeholder.
pub fn render(
    name: &str,
    text: &str,
    vars: &serde_json::Map<String, Json>,
) -> Result<String, TemplateError> {
    let tmpl = parse(name, text)?;
    execute(name, &tmpl, vars).0
}

/// Parse `text` with the helpers registered, refusing recursive templates.
fn parse(name: &str, text: &str) -> Result<Template, TemplateError> {
    let mut tmpl = Template::with_name(name);
    tmpl.add_funcs(&helpers());
    tmpl.parse(text).map_err(|e| TemplateError::Parse {
        name: name.to_string(),
        detail: e.to_string(),
    })?;
    // gtmpl has no depth limit: a template that calls itself overflows the stack
    // and aborts the process, so cycles are refused before rendering.
    check_recursion(&tmpl).map_err(|detail| TemplateError::Parse {
        name: name.to_string(),
        detail,
    })?;
    Ok(tmpl)
}

/// Execute a parsed template with `vars`. Also says whether one of our
/// helpers other than `default` was handed a missing value during this
/// execution (see [`NoValueSeen`]), which [`render_strict`] reads, whether or
/// not the execution then failed. Execution runs on the calling thread, so
/// the thread-local flag belongs to this execution alone.
fn execute(
    name: &str,
    tmpl: &Template,
    vars: &serde_json::Map<String, Json>,
) -> (Result<String, TemplateError>, NoValueSeen) {
    NO_VALUE_ARG.with(|f| f.set(false));
    let data = Value::Map(vars.iter().map(|(k, v)| (k.clone(), to_gtmpl(v))).collect());
    let mut out = Capped::default();
    let rendered = tmpl.execute(&mut out, &Context::from(data));
    let seen = NoValueSeen(NO_VALUE_ARG.with(|f| f.replace(false)));
    let render_err = |detail: String| TemplateError::Render {
        name: name.to_string(),
        detail,
    };
    if out.over {
        // Checked while writing, so a template that would write gigabytes
        // stops at the cap instead of allocating them first.
        return (
            Err(render_err(format!(
                "the rendered policy is over {MAX_RENDER_BYTES} bytes, the most allowed (a policy is a schema and a state, not a document store)"
            ))),
            seen,
        );
    }
    let out = rendered
        .map_err(|e| render_err(e.to_string()))
        .and_then(|()| {
            String::from_utf8(out.bytes)
                .map_err(|e| render_err(format!("the rendered policy is not UTF-8: {e}")))
        });
    (out, seen)
}

/// Whether a helper other than `default` received a missing value (Go's
/// `<no value>`: an unset variable, or a `null` one) as an argument during
/// one execution: `toJson .x` writes `null`, `printf "%s" .x` writes `<nil>`
/// and `upper .x` fails, so the output alone does not show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NoValueSeen(bool);

thread_local! {
    /// Set by [`note_no_value`] during [`execute`]; gtmpl's function type is a
    /// plain `fn`, which can carry no state of its own.
    static NO_VALUE_ARG: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Record that a helper was handed a missing value, when one of `args` is.
fn note_no_value(args: &[Value]) {
    if args.iter().any(|a| matches!(a, Value::NoValue)) {
        NO_VALUE_ARG.with(|f| f.set(true));
    }
}

/// Deepest nesting of a template's actions (bodies of `if`, `range`, `with`,
/// `define`; parenthesized pipelines), and of the bodies rendered at once
/// counted across template calls: 100, so the deepest policy accepted renders
/// on a server thread's 2 MiB stack (`tests/template_syntax.rs`). Set in the
/// vendored gtmpl (`vendor/gtmpl/PATCHES.md`).
pub use gtmpl::MAX_NESTING;
/// Deepest chain of `{{ template }}` calls one render follows: 16 (vendored
/// gtmpl, as [`MAX_NESTING`]).
pub use gtmpl::MAX_TEMPLATE_DEPTH;

/// Largest rendered template, bytes (8 MiB: the server's default body limit).
pub const MAX_RENDER_BYTES: usize = 8 * 1024 * 1024;

/// The render's output, refusing to grow past [`MAX_RENDER_BYTES`]: the
/// write that would cross it fails (gtmpl then stops with an I/O error) and
/// `over` is set.
#[derive(Debug, Default)]
struct Capped {
    bytes: Vec<u8>,
    over: bool,
}

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len().saturating_add(buf.len()) > MAX_RENDER_BYTES {
            self.over = true;
            return Err(std::io::Error::other("rendered policy over the size limit"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Most spaces `indent` may add per line, and the largest `printf` width or
/// precision: bounds on what one helper call can make a render allocate.
pub const MAX_PAD: usize = 10_000;

/// The names of the templates `text` (a parsed tree printed back) calls with
/// `{{template NAME …}}`; a dynamic name comes back as `None`.
fn template_calls(text: &str) -> Vec<Option<String>> {
    text.match_indices("{{template ")
        .map(|(at, m)| {
            let rest = &text[at + m.len()..];
            let end = rest.find([' ', '}']).unwrap_or(rest.len());
            let name = &rest[..end];
            // A constant name prints bare; a pipeline prints with its own syntax.
            (!name.is_empty() && !name.starts_with(['(', '$', '.', '"'])).then(|| name.to_owned())
        })
        .collect()
}

/// Refuse templates that can call themselves (directly or through others): the
/// renderer has no depth limit.
fn check_recursion(tmpl: &Template) -> Result<(), String> {
    let calls: HashMap<&str, Vec<Option<String>>> = tmpl
        .tree_set
        .iter()
        .map(|(name, tree)| {
            let text = tree
                .root
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default();
            (name.as_str(), template_calls(&text))
        })
        .collect();
    fn visit<'a>(
        name: &'a str,
        calls: &'a HashMap<&'a str, Vec<Option<String>>>,
        path: &mut Vec<&'a str>,
    ) -> Result<(), String> {
        if let Some(start) = path.iter().position(|p| *p == name) {
            let mut cycle: Vec<&str> = path[start..].to_vec();
            cycle.push(name);
            return Err(format!(
                "template \"{name}\" calls itself ({}); recursive templates are not supported",
                cycle.join(" → ")
            ));
        }
        let Some(next) = calls.get(name) else {
            return Ok(());
        };
        path.push(name);
        for callee in next {
            match callee {
                Some(c) => visit(c.as_str(), calls, path)?,
                None => {
                    return Err(format!(
                        "template \"{name}\" calls a template by a computed name; only constant names (`{{{{template \"x\"}}}}`) are supported"
                    ))
                }
            }
        }
        path.pop();
        Ok(())
    }
    let mut names: Vec<&&str> = calls.keys().collect();
    names.sort();
    for name in names {
        visit(name, &calls, &mut Vec::new())?;
    }
    Ok(())
}

/// Variables referenced as `.name` inside `{{ … }}` actions (comments skipped),
/// in order of first use.
pub fn template_variables(text: &str) -> Vec<String> {
    let mut vars: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else { break };
        let action = &after[..end];
        rest = &after[end + 2..];
        if action
            .trim_start_matches('-')
            .trim_start()
            .starts_with("/*")
        {
            continue;
        }
        let bytes = action.as_bytes();
        for (i, &b) in bytes.iter().enumerate() {
            if b != b'.' {
                continue;
            }
            let prev_ok = i == 0
                || matches!(
                    bytes[i - 1],
                    b' ' | b'(' | b'\t' | b'\n' | b'|' | b',' | b'-' | b'$'
                );
            let ident: String = action[i + 1..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let starts_alpha = ident
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
            if prev_ok && starts_alpha && !vars.contains(&ident) {
                vars.push(ident);
            }
        }
    }
    vars
}

/// The helper functions registered on every template.
fn helpers() -> Vec<(&'static str, Func)> {
    vec![
        ("toJson", to_json as Func),
        ("toPrettyJson", to_pretty_json as Func),
        ("default", default as Func),
        ("indent", indent as Func),
        ("upper", upper as Func),
        ("lower", lower as Func),
        ("trim", trim as Func),
        ("printf", printf as Func),
    ]
}

/// Convert a JSON value to a gtmpl value. `null` becomes `NoValue`, which
/// prints as `<no value>` like a nil interface in Go.
pub(crate) fn to_gtmpl(v: &Json) -> Value {
    match v {
        Json::Null => Value::NoValue,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                Value::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Json::String(s) => Value::String(s.clone()),
        Json::Array(a) => Value::Array(a.iter().map(to_gtmpl).collect()),
        Json::Object(o) => Value::Map(
            o.iter()
                .map(|(k, v)| (k.clone(), to_gtmpl(v)))
                .collect::<HashMap<_, _>>(),
        ),
    }
}

/// Convert a gtmpl value back to JSON. Map keys are sorted, as Go's
/// `json.Marshal` sorts map keys; integral floats print without `.0`.
pub(crate) fn to_json_value(v: &Value) -> Result<Json, FuncError> {
    Ok(match v {
        Value::NoValue | Value::Nil => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::String(s) => Json::String(s.clone()),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Json::from(i)
            } else if let Some(u) = n.as_u64() {
                Json::from(u)
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                if f.fract() == 0.0 && f.abs() < 9.0e15 {
                    Json::from(f as i64)
                } else {
                    serde_json::Number::from_f64(f)
                        .map(Json::Number)
                        .ok_or_else(|| {
                            FuncError::Generic(format!("toJson: {f} is not representable in JSON"))
                        })?
                }
            }
        }
        Value::Array(a) => Json::Array(a.iter().map(to_json_value).collect::<Result<_, _>>()?),
        Value::Map(m) | Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let mut out = serde_json::Map::new();
            for k in keys {
                if let Some(item) = m.get(k) {
                    out.insert(k.clone(), to_json_value(item)?);
                }
            }
            Json::Object(out)
        }
        Value::Function(_) => {
            return Err(FuncError::Generic(
                "toJson: a function cannot be encoded".into(),
            ))
        }
    })
}

fn one_arg<'a>(name: &str, args: &'a [Value]) -> Result<&'a Value, FuncError> {
    note_no_value(args);
    match args {
        [v] => Ok(v),
        _ => Err(FuncError::ExactlyXArgs(name.into(), 1)),
    }
}

fn encode(v: &Value, pretty: bool) -> Result<Value, FuncError> {
    let json = to_json_value(v)?;
    let text = if pretty {
        serde_json::to_string_pretty(&json)
    } else {
        serde_json::to_string(&json)
    };
    text.map(Value::String)
        .map_err(|e| FuncError::Generic(format!("toJson: {e}")))
}

/// `toJson v`: compact JSON of any value.
fn to_json(args: &[Value]) -> Result<Value, FuncError> {
    encode(one_arg("toJson", args)?, false)
}

/// `toPrettyJson v`: JSON with a 2-space indent.
fn to_pretty_json(args: &[Value]) -> Result<Value, FuncError> {
    encode(one_arg("toPrettyJson", args)?, true)
}

/// `default def val`: `def` when `val` is nil, missing or a whitespace-only
/// string; otherwise `val` (a `false` stays `false`).
fn default(args: &[Value]) -> Result<Value, FuncError> {
    match args {
        [def] => Ok(def.clone()),
        [def, val] => Ok(match val {
            Value::NoValue | Value::Nil => def.clone(),
            Value::String(s) if s.trim().is_empty() => def.clone(),
            other => other.clone(),
        }),
        _ => Err(FuncError::Generic(format!(
            "default takes 2 arguments (default, value); got {}",
            args.len()
        ))),
    }
}

/// Text of a string-like argument; nil and collections are an error, as a Go
/// `func(string)` would refuse them.
fn text_arg(name: &str, v: &Value) -> Result<String, FuncError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(_) | Value::Bool(_) => Ok(gofmt::go_text(v)),
        other => Err(FuncError::Generic(format!(
            "{name} expects a string; got {}",
            match other {
                Value::NoValue | Value::Nil => "no value".to_string(),
                Value::Array(_) => "a list".to_string(),
                _ => "a map".to_string(),
            }
        ))),
    }
}

/// `indent n s`: prefix every non-empty line of `s` with `n` spaces.
fn indent(args: &[Value]) -> Result<Value, FuncError> {
    note_no_value(args);
    let [n, s] = args else {
        return Err(FuncError::ExactlyXArgs("indent".into(), 2));
    };
    let n = match n {
        Value::Number(num) => num.as_u64().or_else(|| num.as_f64().map(|f| f as u64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .ok_or_else(|| {
        FuncError::Generic(format!(
            "indent: the first argument must be a count of spaces; got {}",
            gofmt::go_text(n)
        ))
    })?;
    if n > MAX_PAD as u64 {
        return Err(FuncError::Generic(format!(
            "indent: at most {MAX_PAD} spaces; got {n}"
        )));
    }
    let pad = " ".repeat(n as usize);
    let text = text_arg("indent", s)?;
    let lines = text.split('\n').filter(|l| !l.is_empty()).count();
    let grown = text.len().saturating_add(lines.saturating_mul(pad.len()));
    if grown > MAX_RENDER_BYTES {
        // Refused before allocating: nested `indent`s multiply.
        return Err(FuncError::Generic(format!(
            "indent: the result would be {grown} bytes; a rendered policy holds at most {MAX_RENDER_BYTES}"
        )));
    }
    let out: Vec<String> = text
        .split('\n')
        .map(|line| {
            if line.is_empty() {
                String::new()
            } else {
                format!("{pad}{line}")
            }
        })
        .collect();
    Ok(Value::String(out.join("\n")))
}

/// `printf fmt args…`: Go's `printf` ([`gofmt::printf`]).
fn printf(args: &[Value]) -> Result<Value, FuncError> {
    note_no_value(args);
    gofmt::printf(args)
}

fn upper(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::String(
        text_arg("upper", one_arg("upper", args)?)?.to_uppercase(),
    ))
}

fn lower(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::String(
        text_arg("lower", one_arg("lower", args)?)?.to_lowercase(),
    ))
}

fn trim(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::String(
        text_arg("trim", one_arg("trim", args)?)?.trim().to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vars(v: Json) -> serde_json::Map<String, Json> {
        match v {
            Json::Object(m) => m,
            _ => panic!("vars must be an object"),
        }
    }

    fn r(text: &str, v: Json) -> String {
        render("t", text, &vars(v)).expect("renders")
    }

    fn fails(text: &str) -> String {
        render("t", text, &serde_json::Map::new())
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn recursive_template_is_refused_instead_of_overflowing_the_stack() {
        let e = fails(r#"{{ define "a" }}{{ template "a" }}{{ end }}{{ template "a" }}"#);
        assert!(e.contains("template \"a\" calls itself (a → a)"), "{e}");
        let e = fails(
            r#"{{ define "a" }}{{ template "b" . }}{{ end }}{{ define "b" }}{{ if . }}{{ template "a" . }}{{ end }}{{ end }}{{ template "a" 1 }}"#,
        );
        assert!(e.contains("recursive templates are not supported"), "{e}");
        // A template called twice, without a cycle, renders.
        assert_eq!(
            r(
                r#"{{ define "x" }}X{{ end }}{{ template "x" }}{{ template "x" }}"#,
                json!({})
            ),
            "XX"
        );
    }

    /// Issue 12, defect 1: rendering is bounded in output size too.
    #[test]
    fn rendered_output_over_the_limit_is_an_error() {
        // 2000 × 10000 spaces from one `indent` per line = 20 MB.
        let lines = "x\n".repeat(2000);
        let e = render(
            "t",
            r#"{{ indent 10000 .s }}"#,
            &vars(json!({ "s": lines })),
        )
        .expect_err("too large")
        .to_string();
        // Refused by `indent` before it allocates the 20 MB.
        assert!(e.contains("a rendered policy holds at most 8388608"), "{e}");
    }

    #[test]
    fn huge_printf_width_and_indent_are_errors_not_crashes() {
        let e = fails(r#"{{ printf "%999999999d" 1 }}"#);
        assert!(e.contains("widths and precisions are at most 10000"), "{e}");
        let e = fails(r#"{{ printf "%.99999999999s" "x" }}"#);
        assert!(e.contains("at most 10000"), "{e}");
        let e = fails(r#"{{ indent 99999999999 "x" }}"#);
        assert!(e.contains("indent: at most 10000 spaces"), "{e}");
        assert_eq!(
            r(r#"{{ printf "%5d|%-3s|" 42 "a" }}"#, json!({})),
            "   42|a  |"
        );
    }

    /// Issue 38: the documented limit is a width of 10 000, but a zero-padded
    /// `%010000d` was refused (its digits were counted with the `0` flag).
    #[test]
    fn zero_padded_width_at_the_limit_is_allowed() {
        let out = r(r#"{{ printf "%010000d" 7 }}"#, json!({}));
        assert_eq!(out.len(), 10_000);
        assert!(out.ends_with('7'), "{}", &out[out.len() - 5..]);
        let e = fails(r#"{{ printf "%010001d" 7 }}"#);
        assert!(e.contains("at most 10000"), "{e}");
    }

    #[test]
    fn to_json_quotes_and_encodes() {
        assert_eq!(
            r("{{ .s | toJson }}", json!({"s": "a \"b\"\n"})),
            r#""a \"b\"\n""#
        );
        assert_eq!(
            r("{{ toJson .n }}|{{ toJson .f }}", json!({"n": 4, "f": 0.5})),
            "4|0.5"
        );
        assert_eq!(
            r("{{ toJson .m }}", json!({"m": {"b": [1, true], "a": null}})),
            r#"{"a":null,"b":[1,true]}"#
        );
        assert_eq!(r("{{ toJson .missing }}", json!({})), "null");
        assert_eq!(
            r("{{ toPrettyJson .m }}", json!({"m": {"a": [1]}})),
            "{\n  \"a\": [\n    1\n  ]\n}"
        );
    }

    #[test]
    fn default_rules() {
        assert_eq!(r("{{ default \"d\" .x }}", json!({})), "d");
        assert_eq!(r("{{ default \"d\" .x }}", json!({"x": null})), "d");
        assert_eq!(r("{{ default \"d\" .x }}", json!({"x": "  "})), "d");
        assert_eq!(r("{{ default \"d\" .x }}", json!({"x": " v "})), " v ");
        assert_eq!(r("{{ default true .x }}", json!({"x": false})), "false");
        assert_eq!(r("{{ default 4 .x }}", json!({"x": 0})), "0");
        assert_eq!(r("{{ .x | default \"d\" }}", json!({})), "d");
        assert_eq!(
            r(
                "{{ default \"auto\" .samples | toJson }}",
                json!({"samples": "4"})
            ),
            "\"4\""
        );
    }

    #[test]
    fn string_helpers() {
        assert_eq!(
            r(
                "{{ upper .s }}|{{ lower .s }}|[{{ trim .s }}]",
                json!({"s": " Ab "})
            ),
            " AB | ab |[Ab]"
        );
        assert_eq!(r("{{ indent 2 .s }}", json!({"s": "a\n\nb"})), "  a\n\n  b");
        assert_eq!(r("{{ .s | indent 4 }}", json!({"s": "x"})), "    x");
        let err = render("t", "{{ upper .missing }}", &vars(json!({}))).expect_err("must fail");
        assert!(
            err.to_string()
                .contains("upper expects a string; got no value"),
            "{err}"
        );
    }

    #[test]
    fn go_builtins() {
        assert_eq!(
            r("{{ printf \"%q\" .s }}", json!({"s": "say \"hi\""})),
            r#""say \"hi\"""#
        );
        assert_eq!(r("{{ printf \"%s=%d\" .k 3 }}", json!({"k": "n"})), "n=3");
        assert_eq!(r("{{ or .a .b \"c\" }}", json!({"b": "B"})), "B");
        assert_eq!(r("a  {{- .x -}}  b", json!({"x": 1})), "a1b");
        assert_eq!(
            r("{{ if .f }}y{{ else }}n{{ end }}", json!({"f": false})),
            "n"
        );
        assert_eq!(
            r("[{{ .missing }}][{{ .nil }}]", json!({"nil": null})),
            "[<no value>][<no value>]"
        );
    }

    #[test]
    fn errors_name_the_template() {
        let err = render("p.json.tmpl", "{{ if }}", &vars(json!({}))).expect_err("must fail");
        assert!(
            matches!(&err, TemplateError::Parse { name, .. } if name == "p.json.tmpl"),
            "{err:?}"
        );
        let err = render("p.json.tmpl", "{{ nope 1 }}", &vars(json!({}))).expect_err("must fail");
        assert!(
            err.to_string().starts_with("template `p.json.tmpl`"),
            "{err}"
        );
        let err = render("p", "{{ toJson }}", &vars(json!({}))).expect_err("must fail");
        assert!(matches!(err, TemplateError::Render { .. }), "{err:?}");
    }

    #[test]
    fn envelope_template_a() {
        let text = r#"{"schema": {"questions": [{"id": "urgent", "type": "boolean"}],
  "samples": {{ default "auto" .samples | toJson }}},
 "state": {"ticket": {{ default "No ticket text provided" .ticket | toJson }}}}"#;
        let out: Json = serde_json::from_str(&r(text, json!({}))).expect("json");
        assert_eq!(out["schema"]["samples"], "auto");
        assert_eq!(out["state"]["ticket"], "No ticket text provided");
        let out: Json = serde_json::from_str(&r(text, json!({"samples": "4", "ticket": "x\"y"})))
            .expect("json");
        assert_eq!(out["schema"]["samples"], "4");
        assert_eq!(out["state"]["ticket"], "x\"y");
    }

    #[test]
    fn range_template_c() {
        let text = r#"{"options": [ {{ range $i, $opt := .options }}{{ if $i }},{{ end }}{"name": {{ $opt | toJson }}}{{ end }} ],
"samples": {{ default 1 .samples | toJson }},
"state": {"customer_utterance": {{ .text | toJson }}}}"#;
        let out = r(
            text,
            json!({"options": ["card_lost", "top_up"], "text": "hi"}),
        );
        let v: Json = serde_json::from_str(&out).expect("json");
        assert_eq!(
            v,
            json!({"options": [{"name": "card_lost"}, {"name": "top_up"}], "samples": 1, "state": {"customer_utterance": "hi"}})
        );
    }
}
