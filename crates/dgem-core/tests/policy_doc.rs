//! `docs/policy.md` is the policy reference. This test keeps it true to the
//! validator, so the document cannot drift from the code:
//!
//! * every fenced block marked ` ```json policy ` is a schema object that
//!   [`ValidSchema::from_value`] accepts, and every ` ```json policy-error
//!   field=F ` one it refuses with `SchemaError.field == F`. A plain block must
//!   behave the same as given (the chat route) and after the template aliases
//!   ([`normalize_schema`], what a `.json.tmpl` policy goes through); `raw` checks
//!   only the first, `normalized` only the second. Other `key=value` words state
//!   what the validated schema holds (`steps=8`, `alts.team=a,b`, …);
//! * every ` ```gotmpl policy-template ` block renders, with no variables and
//!   with those of the ` ```json vars ` block after it, to a valid policy whose
//!   state is not empty;
//! * the limits table lists every constant of `schema/mod.rs` and
//!   `schema/validate/settings.rs` (read from the source, so a new one must be
//!   documented) and the bracket, temperature and render limits, each with the
//!   value the code has;
//! * every key the validator, the post-read parser and the alias step read is
//!   named in the first column of a table;
//! * every key with limits has at least one accepted and one refused example.

use std::collections::{BTreeMap, BTreeSet};

use dgem_core::payload::{normalize_schema, parse_named_payload};
use dgem_core::schema::{self, AnswerFormat, SamplePolicy, SchemaDefaults, ValidSchema};
use serde_json::{Map, Value};

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/policy.md");

/// Fewest examples of each kind the document must keep.
const MIN_VALID: usize = 45;
const MIN_ERRORS: usize = 70;
const MIN_TEMPLATES: usize = 2;

fn doc() -> String {
    std::fs::read_to_string(DOC).expect("docs/policy.md is readable")
}

/// One fenced code block: the line of its opening fence, its info string, its text.
#[derive(Debug, Clone)]
struct Block {
    line: usize,
    info: String,
    body: String,
}

fn fenced_blocks(doc: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in doc.lines().enumerate() {
        let t = line.trim();
        match open.as_mut() {
            None => {
                if let Some(info) = t.strip_prefix("```") {
                    open = Some(Block {
                        line: i + 1,
                        info: info.trim().to_string(),
                        body: String::new(),
                    });
                }
            }
            Some(b) => {
                if t == "```" {
                    out.extend(open.take());
                } else {
                    b.body.push_str(line);
                    b.body.push('\n');
                }
            }
        }
    }
    assert!(
        open.is_none(),
        "docs/policy.md: the block opened at line {} is never closed",
        open.map_or(0, |b| b.line)
    );
    out
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Valid,
    Error(String),
    Template,
    Vars,
}

/// Which paths a schema block is checked on.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Paths {
    Both,
    Raw,
    Normalized,
}

#[derive(Debug, Clone)]
struct Marked {
    block: Block,
    kind: Kind,
    paths: Paths,
    expect: Vec<(String, String)>,
}

/// The marked blocks; a block whose second word starts with `policy` but is
/// not a known marker fails the test (a typo must not skip a check).
fn marked(doc: &str) -> Vec<Marked> {
    let mut out = Vec::new();
    for b in fenced_blocks(doc) {
        let words: Vec<&str> = b.info.split_whitespace().collect();
        let Some(&marker) = words.get(1) else {
            continue;
        };
        let kind = match (words[0], marker) {
            ("json", "policy") => Kind::Valid,
            ("json", "policy-error") => Kind::Error(String::new()),
            ("gotmpl", "policy-template") => Kind::Template,
            ("json", "vars") => Kind::Vars,
            (_, m) if m.starts_with("policy") || m == "vars" => panic!(
                "docs/policy.md line {}: unknown marker `{}`",
                b.line, b.info
            ),
            _ => continue,
        };
        let mut m = Marked {
            block: b.clone(),
            kind,
            paths: Paths::Both,
            expect: Vec::new(),
        };
        for w in &words[2..] {
            match (*w, w.split_once('=')) {
                ("raw", _) => m.paths = Paths::Raw,
                ("normalized", _) => m.paths = Paths::Normalized,
                (_, Some(("field", f))) => match &mut m.kind {
                    Kind::Error(field) => *field = f.to_string(),
                    _ => panic!("line {}: `field=` belongs on policy-error blocks", b.line),
                },
                (_, Some((k, v))) => m.expect.push((k.to_string(), v.to_string())),
                _ => panic!("line {}: unknown word `{w}` in `{}`", b.line, b.info),
            }
        }
        if let Kind::Error(f) = &m.kind {
            assert!(!f.is_empty(), "line {}: policy-error needs field=", b.line);
            assert!(
                m.expect.is_empty(),
                "line {}: a refused schema has nothing to expect",
                b.line
            );
        }
        out.push(m);
    }
    out
}

fn parse_json(m: &Marked) -> Value {
    serde_json::from_str(&m.block.body).unwrap_or_else(|e| {
        panic!(
            "docs/policy.md line {}: the block is not JSON: {e}",
            m.block.line
        )
    })
}

fn normalized(v: &Value) -> Value {
    let mut v = v.clone();
    normalize_schema(&mut v);
    v
}

fn list(items: impl IntoIterator<Item = String>) -> String {
    let v: Vec<String> = items.into_iter().collect();
    if v.is_empty() {
        "-".to_string()
    } else {
        v.join(",")
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |x| x.to_string())
}

/// The value of expectation `key` in `s`, as the document writes it.
fn observed(s: &ValidSchema, key: &str, line: usize) -> String {
    let question = |id: &str| {
        s.question(id)
            .unwrap_or_else(|| panic!("line {line}: `{key}` names no question"))
    };
    match key.split_once('.') {
        None => match key {
            "steps" => s.steps.to_string(),
            "think" => s.think.to_string(),
            "think_optional" => s.think_optional.to_string(),
            "requires_image" => s.requires_image.to_string(),
            "samples" => match s.samples {
                SamplePolicy::Fixed { n } => n.to_string(),
                SamplePolicy::Auto { max, threshold } => format!("auto:{max}:{threshold}"),
            },
            "isolated" => list(s.isolated()),
            "format" => match s.format {
                AnswerFormat::Lines => "lines".into(),
                AnswerFormat::Indexed => "indexed".into(),
            },
            "ask" => list(s.ask.clone().unwrap_or_default()),
            "chunk_rows" => opt(s.chunk_rows),
            "chunk_prompt" => serde_json::to_value(s.chunk_prompt)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            "sequential" => s.sequential.to_string(),
            "layout" => s.layout.as_str().into(),
            "isolate" => s.isolate.as_str().into(),
            "instructions" => opt(s.instructions.clone()),
            "questions" => list(s.questions.iter().map(|q| q.id.clone())),
            "stages" => dgem_core::stages::schedule(s)
                .expect("a valid schema schedules")
                .iter()
                .map(|st| st.join(","))
                .collect::<Vec<_>>()
                .join("/"),
            _ => panic!("line {line}: unknown expectation `{key}`"),
        },
        Some((what, id)) => match what {
            "alts" => list(question(id).alternatives.iter().map(|a| a.name.clone())),
            "descs" => list(
                question(id)
                    .alternatives
                    .iter()
                    .map(|a| a.description.clone().unwrap_or_else(|| "-".into())),
            ),
            "kind" => question(id).kind.as_str().into(),
            "depends" => list(question(id).depends_on.clone()),
            "instructions" => question(id).instructions.clone(),
            "temperature" => {
                let t = s.after.temperature;
                let kind = dgem_core::schema::QuestionKind::parse(id)
                    .unwrap_or_else(|| panic!("line {line}: `{key}`: a question type"));
                opt(t.of(kind))
            }
            "abstain_below" => opt(s.after.abstain.rule_for(id).below),
            "abstain_above" => opt(s.after.abstain.rule_for(id).above),
            _ => panic!("line {line}: unknown expectation `{key}`"),
        },
    }
}

/// Validate `raw` on the paths `m` names; record every way the result differs from `m`.
fn check_schema_block(m: &Marked, raw: &Value, failures: &mut Vec<String>) {
    let line = m.block.line;
    let defaults = SchemaDefaults::default();
    let mut paths: Vec<(&str, Value)> = Vec::new();
    if m.paths != Paths::Normalized {
        paths.push(("as given", raw.clone()));
    }
    if m.paths != Paths::Raw {
        paths.push(("after the template aliases", normalized(raw)));
    }
    for (how, v) in paths {
        let got = ValidSchema::from_value(&v, &defaults);
        match (&m.kind, got) {
            (Kind::Valid, Ok(s)) => {
                for (k, want) in &m.expect {
                    let seen = observed(&s, k, line);
                    if &seen != want {
                        failures.push(format!(
                            "line {line} ({how}): expected {k}={want}, the validator gives {k}={seen}"
                        ));
                    }
                }
            }
            (Kind::Valid, Err(e)) => failures.push(format!(
                "line {line} ({how}): must validate, refused on `{}`: {}",
                e.field, e.message
            )),
            (Kind::Error(field), Err(e)) if &e.field == field => {}
            (Kind::Error(field), Err(e)) => failures.push(format!(
                "line {line} ({how}): must be refused on `{field}`, refused on `{}`: {}",
                e.field, e.message
            )),
            (Kind::Error(field), Ok(_)) => failures.push(format!(
                "line {line} ({how}): must be refused on `{field}`, but it validates"
            )),
            _ => {}
        }
    }
}

fn check_template(m: &Marked, vars: Option<&Value>, failures: &mut Vec<String>) {
    let line = m.block.line;
    let mut sets: Vec<(&str, Map<String, Value>)> = vec![("no variables", Map::new())];
    if let Some(v) = vars {
        let map = v
            .as_object()
            .cloned()
            .unwrap_or_else(|| panic!("line {line}: the vars block must be an object"));
        sets.push(("the vars block", map));
    }
    for (how, vars) in sets {
        let name = format!("policy.md:{line}");
        let rendered = match dgem_core::template::render(&name, &m.block.body, &vars) {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("line {line} ({how}): does not render: {e}"));
                continue;
            }
        };
        // Given its vars block, an example must not lean on a placeholder
        // for a variable it reads (what a decision refuses).
        if how == "the vars block" {
            if let Err(e) = dgem_core::template::render_strict(&name, &m.block.body, &vars, false) {
                failures.push(format!("line {line} ({how}): {e}"));
            }
        }
        let payload = match parse_named_payload(&name, &rendered, &vars) {
            Ok(p) => p,
            Err(e) => {
                failures.push(format!("line {line} ({how}): not a payload: {e}"));
                continue;
            }
        };
        match ValidSchema::from_value(&payload.schema, &SchemaDefaults::default()) {
            Ok(s) => {
                for (k, want) in &m.expect {
                    let seen = observed(&s, k, line);
                    if &seen != want {
                        failures.push(format!(
                            "line {line} ({how}): expected {k}={want}, the validator gives {k}={seen}"
                        ));
                    }
                }
            }
            Err(e) => failures.push(format!(
                "line {line} ({how}): the rendered schema is refused on `{}`: {}",
                e.field, e.message
            )),
        }
        if let Err(e) = dgem_core::state::check_informative(&payload.state) {
            failures.push(format!("line {line} ({how}): empty state: {e}"));
        }
    }
}

#[test]
fn every_marked_example_behaves_as_documented() {
    let doc = doc();
    let blocks = marked(&doc);
    let mut failures = Vec::new();
    let (mut valid, mut errors, mut templates) = (0, 0, 0);
    for (i, m) in blocks.iter().enumerate() {
        match m.kind {
            Kind::Valid | Kind::Error(_) => {
                if m.kind == Kind::Valid {
                    valid += 1;
                } else {
                    errors += 1;
                }
                let raw = parse_json(m);
                check_schema_block(m, &raw, &mut failures);
            }
            Kind::Template => {
                templates += 1;
                let vars = blocks
                    .get(i + 1)
                    .filter(|n| n.kind == Kind::Vars)
                    .map(parse_json);
                check_template(m, vars.as_ref(), &mut failures);
            }
            Kind::Vars => {
                let after_template = i > 0 && blocks[i - 1].kind == Kind::Template;
                assert!(
                    after_template,
                    "line {}: a vars block must follow a policy-template block",
                    m.block.line
                );
            }
        }
    }
    assert!(
        failures.is_empty(),
        "docs/policy.md disagrees with the validator:\n{}",
        failures.join("\n")
    );
    assert!(
        valid >= MIN_VALID && errors >= MIN_ERRORS && templates >= MIN_TEMPLATES,
        "docs/policy.md lost examples: {valid} valid (at least {MIN_VALID}), {errors} refused \
         (at least {MIN_ERRORS}), {templates} templates (at least {MIN_TEMPLATES})"
    );
}

/// The rows of every table of the document, each with the first cell of its
/// table's header row (separator rows left out).
fn table_rows(doc: &str) -> Vec<(String, Vec<String>)> {
    let cells = |l: &str| -> Vec<String> {
        l.trim_matches('|')
            .split(" | ")
            .map(|c| c.trim().to_string())
            .collect()
    };
    let mut out = Vec::new();
    let mut header: Option<String> = None;
    for l in doc.lines().map(str::trim) {
        if !(l.starts_with('|') && l.ends_with('|')) {
            header = None;
            continue;
        }
        if l.chars().all(|c| matches!(c, '|' | ':' | '-' | ' ')) {
            continue;
        }
        let row = cells(l);
        match &header {
            None => header = row.first().cloned(),
            Some(h) => out.push((h.clone(), row)),
        }
    }
    out
}

/// Backticked spans of `cell`.
fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s.to_string())
        .collect()
}

/// Numeric `const NAME: T = VALUE;` declarations of a source file (`pub` or
/// not; `T` an integer or float type).
fn source_consts(src: &str) -> Vec<(String, String)> {
    const NUMERIC: [&str; 6] = ["usize", "u32", "u64", "i64", "f64", "f32"];
    src.lines()
        .map(str::trim)
        .filter_map(|l| l.strip_prefix("pub ").or(Some(l)))
        .filter_map(|l| l.strip_prefix("const "))
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let (ty, value) = rest.split_once('=')?;
            NUMERIC.contains(&ty.trim()).then(|| {
                (
                    name.trim().to_string(),
                    value.trim().trim_end_matches(';').trim().to_string(),
                )
            })
        })
        .collect()
}

#[test]
fn the_limits_table_matches_the_constants() {
    let doc = doc();
    let mut table: BTreeMap<String, f64> = BTreeMap::new();
    for (_, row) in table_rows(&doc) {
        let Some(name) = row.first().map(|c| c.trim_matches('`')) else {
            continue;
        };
        let is_const = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            && name.contains('_');
        if !is_const {
            continue;
        }
        let value = row
            .get(1)
            .map(|v| v.trim_matches('`').replace(['_', ','], ""))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("limits table: `{name}` needs a number in its 2nd column"));
        if let Some(old) = table.insert(name.to_string(), value) {
            assert_eq!(old, value, "`{name}` is listed twice with different values");
        }
    }
    // The code's values, where a test can name the constant.
    let known: Vec<(&str, f64)> = vec![
        ("MAX_QUESTIONS", schema::MAX_QUESTIONS as f64),
        ("MAX_ID_CHARS", schema::MAX_ID_CHARS as f64),
        ("MIN_ALTERNATIVES", schema::MIN_ALTERNATIVES as f64),
        ("MAX_ALTERNATIVES", schema::MAX_ALTERNATIVES as f64),
        ("MAX_SAMPLES", f64::from(schema::MAX_SAMPLES)),
        ("MAX_THINK", f64::from(schema::MAX_THINK)),
        (
            "LINES_FORMAT_MAX_QUESTIONS",
            schema::LINES_FORMAT_MAX_QUESTIONS as f64,
        ),
        ("ISOLATE_AUTO_MAX", schema::ISOLATE_AUTO_MAX as f64),
        (
            "ISOLATE_MAX_QUESTIONS",
            schema::ISOLATE_MAX_QUESTIONS as f64,
        ),
        (
            "MAX_BRACKET_OPTIONS",
            dgem_core::brackets::MAX_BRACKET_OPTIONS as f64,
        ),
        ("BRACKET_SIZE", dgem_core::brackets::BRACKET_SIZE as f64),
        ("MAX_RULES", dgem_core::rules::MAX_RULES as f64),
        ("MAX_ASSIGNMENTS", dgem_core::rules::MAX_ASSIGNMENTS as f64),
        ("MAX_RULE_CHECKS", dgem_core::rules::MAX_RULE_CHECKS as f64),
        (
            "MAX_TEMPERATURE",
            dgem_core::after::temperature::MAX_TEMPERATURE,
        ),
        (
            "MAX_RENDER_BYTES",
            dgem_core::template::MAX_RENDER_BYTES as f64,
        ),
        ("MAX_NESTING", dgem_core::template::MAX_NESTING as f64),
        (
            "MAX_TEMPLATE_DEPTH",
            dgem_core::template::MAX_TEMPLATE_DEPTH as f64,
        ),
    ];
    let mut missing = Vec::new();
    for (name, value) in &known {
        match table.get(*name) {
            Some(v) if v == value => {}
            Some(v) => missing.push(format!("`{name}` is {value} in the code, {v} in the doc")),
            None => missing.push(format!("`{name}` ({value}) is not in the limits table")),
        }
    }
    // Every constant of the schema module and the settings rules, from the
    // source: a new limit must be documented.
    let sources = [
        ("schema/mod.rs", include_str!("../src/schema/mod.rs")),
        (
            "schema/validate/settings.rs",
            include_str!("../src/schema/validate/settings.rs"),
        ),
    ];
    for (file, src) in sources {
        let consts = source_consts(src);
        assert!(!consts.is_empty(), "no constants found in {file}");
        for (name, literal) in consts {
            let value = known
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| *v)
                .or_else(|| literal.replace('_', "").parse::<f64>().ok())
                .unwrap_or_else(|| {
                    panic!("{file}: `{name} = {literal}` is not a number; name it in `known`")
                });
            match table.get(&name) {
                Some(v) if *v == value => {}
                Some(v) => missing.push(format!("`{name}` is {value} in {file}, {v} in the doc")),
                None => missing.push(format!(
                    "`{name}` ({value}, {file}) is not in the limits table"
                )),
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// Every string literal that follows `prefix` in `src` (`get("steps")` …).
fn literals_after(src: &str, prefix: &str) -> BTreeSet<String> {
    src.match_indices(prefix)
        .filter_map(|(at, p)| {
            let rest = &src[at + p.len()..];
            let end = rest.find('"')?;
            Some(rest[..end].to_string())
        })
        .collect()
}

#[test]
fn every_key_the_validator_reads_is_in_a_table() {
    let doc = doc();
    // The reference tables: schema keys (§2), question keys (§3), the rendered
    // object (§1), the aliases (§11), the post-read tables (§8).
    let reference = [
        "Key",
        "Question key",
        "Key of the rendered object",
        "Written in a template",
        "`temperature` object key",
        "Rule key",
    ];
    let mut named: BTreeSet<String> = BTreeSet::new();
    for (header, row) in table_rows(&doc) {
        if !reference.contains(&header.as_str()) {
            continue;
        }
        for span in row.first().map(|c| code_spans(c)).unwrap_or_default() {
            for part in span.split(['.', ' ']) {
                named.insert(part.trim_end_matches("[]").to_string());
            }
            named.insert(span);
        }
    }
    let validate = include_str!("../src/schema/validate.rs");
    let settings = include_str!("../src/schema/validate/settings.rs");
    let select = include_str!("../src/schema/validate/select.rs");
    let rules = include_str!("../src/rules/parse.rs");
    let after = include_str!("../src/after/mod.rs");
    let abstain = include_str!("../src/after/abstain.rs");
    let payload = include_str!("../src/payload.rs");
    let mut keys: BTreeSet<String> = BTreeSet::new();
    for src in [validate, settings, select, rules, after] {
        keys.extend(literals_after(src, ".get(\""));
        keys.extend(literals_after(src, "get(obj, \""));
        keys.extend(literals_after(src, "list_field(q, \""));
    }
    for k in ["abstain_below", "abstain_above"] {
        assert!(
            abstain.contains(&format!("\"{k}\"")),
            "abstain.rs no longer reads `{k}`"
        );
        keys.insert(k.to_string());
    }
    keys.extend(literals_after(payload, "get(\""));
    keys.extend(literals_after(payload, "shift_remove(\""));
    // `rename(q, "from", "to")`: both names.
    for (at, _) in payload.match_indices("rename(q, \"") {
        let line = payload[at..].lines().next().unwrap_or_default();
        for (i, part) in line.split('"').enumerate() {
            if i % 2 == 1 {
                keys.insert(part.to_string());
            }
        }
    }
    keys.retain(|k| !k.is_empty());
    for must in [
        "questions",
        "samples",
        "steps",
        "temperature",
        "options",
        "levels",
        "ask_if",
        "choices",
        "items",
    ] {
        assert!(
            keys.contains(must),
            "the source scan lost `{must}`: {keys:?}"
        );
    }
    let missing: Vec<&String> = keys.iter().filter(|k| !named.contains(*k)).collect();
    assert!(
        missing.is_empty(),
        "keys read by the code but named in no reference table of docs/policy.md \
         (first column of a table headed {reference:?}): {missing:?}"
    );
}

/// The keys of `v` at any depth.
fn keys_in(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                out.insert(k.clone());
                keys_in(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| keys_in(x, out)),
        _ => {}
    }
}

/// `questions[3].options[1].name` → `questions.options.name`.
fn field_path(f: &str) -> String {
    let mut out = String::new();
    let mut depth = 0;
    for c in f.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            c if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

#[test]
fn every_limited_key_has_an_accepted_and_a_refused_example() {
    let doc = doc();
    let blocks = marked(&doc);
    let mut used: BTreeSet<String> = BTreeSet::new();
    let mut refused: BTreeSet<String> = BTreeSet::new();
    for m in &blocks {
        match &m.kind {
            Kind::Valid => keys_in(&parse_json(m), &mut used),
            Kind::Error(f) => {
                let p = field_path(f);
                refused.insert(p.clone());
                // `abstain_below.team` is a refusal of `abstain_below`.
                let mut prefix = String::new();
                for part in p.split('.') {
                    if !prefix.is_empty() {
                        prefix.push('.');
                    }
                    prefix.push_str(part);
                    refused.insert(prefix.clone());
                }
            }
            _ => {}
        }
    }
    let schema_keys = [
        "samples",
        "auto_max",
        "auto_threshold",
        "steps",
        "think",
        "think_optional",
        "requires_image",
        "ask",
        "chunk_rows",
        "chunk_prompt",
        "sequential",
        "layout",
        "isolate",
        "temperature",
        "abstain_below",
        "abstain_above",
    ];
    let question_keys = [
        "id",
        "type",
        "criteria",
        "options",
        "levels",
        "depends_on",
        "ask_if",
        "alone",
        "abstain_below",
        "abstain_above",
    ];
    let mut missing = Vec::new();
    if !refused.contains("questions") {
        missing.push("no refused example on `questions`".to_string());
    }
    for k in schema_keys {
        if !used.contains(k) {
            missing.push(format!("no accepted example uses `{k}`"));
        }
        if !refused.contains(k) {
            missing.push(format!("no refused example on `{k}`"));
        }
    }
    for k in question_keys {
        if !used.contains(k) {
            missing.push(format!("no accepted example uses `{k}`"));
        }
        if !refused.contains(&format!("questions.{k}")) {
            missing.push(format!("no refused example on `questions[i].{k}`"));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
