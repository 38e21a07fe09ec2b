//! The policy catalogue every transport serves (HTTP `/api`, MCP over stdio
//! and `/mcp`, the Studio, the gateway, the CLI): a folder of `.json.tmpl`
//! templates first, then the policies built into the binary
//! ([`crate::builtin::BUILTIN`]), so a user's copy wins over a built-in one of
//! the same name and a server started from `/` or `$HOME`, with no folder,
//! still serves the shipped policies. A missing or unreadable folder is an
//! empty one, not an error.
//!
//! Also here: name resolution confined to the folder and rendering into a
//! payload. The variable rules and validation of a decision are the
//! decision service's (`dgem_service::Catalogue`).
//!
//! Messages here name no transport and no server path: a caller adds its own
//! hint for listing the templates ([`TemplateError::with_list_hint`]), e.g. the
//! MCP tool name or the HTTP route.

use std::path::{Component, Path, PathBuf};

use dgem_core::payload::{parse_named_payload, Payload};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::builtin::{builtin, builtin_names, closest};

/// Why a template could not be found, read, rendered or validated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TemplateError {
    /// The name resolves to no template of the folder or the built-ins, or
    /// to a file the folder may not serve. `listable` is true when listing the
    /// catalogue's names would help.
    #[error("template: {message}")]
    Name {
        /// What is wrong, with the name given.
        message: String,
        /// Whether a "list the templates" hint fits this failure.
        listable: bool,
    },
    /// The template file is in the folder but cannot be read (a server-side
    /// problem, e.g. its permissions). The message names the template, not
    /// the file's path.
    #[error("template `{name}` cannot be read: {detail}")]
    Unreadable {
        /// Template name as given.
        name: String,
        /// The I/O error.
        detail: String,
    },
    /// The variables are unknown to the template, or rendering with them, or
    /// parsing the rendered text, failed (field `variables`).
    #[error("variables: {0}")]
    Variables(String),
    /// Variables the template reads with no `default` were not given, or
    /// were `null` (field `variables`): the policy would hold a placeholder
    /// (`<no value>`, `null`) in their place
    /// ([`dgem_core::template::render_strict`]). The message names no
    /// transport: a caller adds how to give a variable and how to opt out.
    #[error("variables: {detail}")]
    Unset {
        /// The core message, naming the variables and those given.
        detail: String,
        /// The variables at fault.
        missing: Vec<String>,
    },
    /// The rendered policy is not a valid schema (field `template`).
    #[error("policy `{name}` is not a valid schema: {detail}")]
    Schema {
        /// Template name.
        name: String,
        /// The schema error, naming the field.
        detail: String,
    },
}

impl TemplateError {
    /// This error's message with `hint` (e.g. "call list_policy_templates for
    /// the names") added where listing the templates would help.
    pub fn with_list_hint(&self, hint: &str) -> String {
        match self {
            Self::Name {
                message,
                listable: true,
            } => match message.split_once(". Given: ") {
                Some((why, given)) => format!("template: {why}; {hint}. Given: {given}"),
                None => format!("template: {message}; {hint}"),
            },
            other => other.to_string(),
        }
    }
}

/// File name ending of a policy template.
pub const TEMPLATE_SUFFIX: &str = ".json.tmpl";

/// The policy catalogue: the `.json.tmpl` templates of a folder (directly in
/// it, and `sub/name` one folder down), then the built-in policies the folder
/// does not have. Names resolve only inside the folder or among the built-ins.
#[derive(Debug, Clone)]
pub struct TemplateDir {
    root: PathBuf,
}

/// Where a template of the catalogue comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateSource {
    /// A file of the folder (its canonical path).
    Folder(PathBuf),
    /// A policy built into the binary (its text).
    BuiltIn(&'static str),
}

/// One question of a template, as the catalog lists it.
#[derive(Debug, Clone, Serialize)]
pub struct QuestionSummary {
    /// Question id.
    pub id: String,
    /// Question type (`noul`, `choice`, `score`, …).
    #[serde(rename = "type")]
    pub kind: String,
}

/// One catalog entry (the MCP `list_policy_templates`). It names no path.
#[derive(Debug, Clone, Serialize)]
pub struct TemplateSummary {
    /// Name to pass as `template` (`support_triage`, `bench/intent_select`).
    pub name: String,
    /// The leading `{{/* … */}}` comment of the template, if any.
    pub description: String,
    /// Questions of the policy rendered with no variables (empty if that fails).
    pub questions: Vec<QuestionSummary>,
    /// Variables referenced in the template text (`.ticket`, `.samples`, …).
    pub variables: Vec<String>,
    /// Why the template could not be rendered with no variables, if it could not.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
}

impl TemplateDir {
    /// The catalogue of the folder `root` (need not exist: then it holds the
    /// built-in policies only).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where template `name` (`support_triage`, `support_triage.json.tmpl`,
    /// `bench/intent_select`) comes from: the folder's file when it has one,
    /// else the built-in policy of that name.
    ///
    /// # Errors
    /// [`TemplateError::Name`] for an empty name, an absolute path, `..` or `.`
    /// components, a file (or symlink) that leads outside the folder or is not
    /// a file, and a name found in neither the folder nor the built-ins (with
    /// the closest known name, if one is near).
    pub fn source(&self, name: &str) -> Result<TemplateSource, TemplateError> {
        let trimmed = checked_name(name)?;
        if let Some(path) = self.in_folder(trimmed, name)? {
            return Ok(TemplateSource::Folder(path));
        }
        let stem = trimmed.strip_suffix(TEMPLATE_SUFFIX).unwrap_or(trimmed);
        if let Some(text) = builtin(stem) {
            return Ok(TemplateSource::BuiltIn(text));
        }
        let names = self.names();
        let hint = closest(stem, names.iter().map(String::as_str))
            .map(|c| format!(" (did you mean `{c}`?)"))
            .unwrap_or_default();
        Err(TemplateError::Name {
            message: format!("no such template{hint}. Given: `{name}`"),
            listable: true,
        })
    }

    /// The folder's file for a checked name, `None` when the folder (missing
    /// or unreadable) has no such file.
    fn in_folder(&self, trimmed: &str, name: &str) -> Result<Option<PathBuf>, TemplateError> {
        let bad = |why: &str| TemplateError::Name {
            message: format!("{why}. Given: `{name}`"),
            listable: false,
        };
        let file = if trimmed.ends_with(TEMPLATE_SUFFIX) {
            self.root.join(trimmed)
        } else {
            self.root.join(format!("{trimmed}{TEMPLATE_SUFFIX}"))
        };
        let Ok(root) = self.root.canonicalize() else {
            return Ok(None);
        };
        let Ok(real) = file.canonicalize() else {
            return Ok(None);
        };
        if !real.starts_with(&root) {
            return Err(bad("resolves outside the templates folder"));
        }
        if !real.is_file() {
            return Err(bad("is not a template file"));
        }
        Ok(Some(real))
    }

    /// The text of template `name`: the folder's file, else the built-in one.
    ///
    /// # Errors
    /// [`TemplateError::Name`] when the name does not resolve
    /// ([`TemplateDir::source`]); [`TemplateError::Unreadable`] when the
    /// folder's file cannot be read.
    pub fn text(&self, name: &str) -> Result<String, TemplateError> {
        match self.source(name)? {
            TemplateSource::BuiltIn(text) => Ok(text.to_string()),
            TemplateSource::Folder(path) => {
                std::fs::read_to_string(&path).map_err(|e| TemplateError::Unreadable {
                    name: name.trim().to_string(),
                    detail: e.to_string(),
                })
            }
        }
    }

    /// Render template `name` with `vars` into a payload, writing Go's
    /// `<no value>` for a variable it reads that is not given: the lenient
    /// render of the catalogue (questions listed with no variables). A
    /// decision renders with [`TemplateDir::render_text_strict`].
    ///
    /// # Errors
    /// Everything [`TemplateDir::text`] returns; [`TemplateError::Variables`]
    /// when rendering or parsing fails.
    pub fn render(&self, name: &str, vars: &Map<String, Value>) -> Result<Payload, TemplateError> {
        self.render_with(name, vars, |label, text| {
            dgem_core::template::render(label, text, vars)
        })
    }

    /// Render policy `name` from its `text` (the folder's or built-in text,
    /// or a file given by path on the command line) with `vars`, refusing a
    /// variable it reads with no `default` that `vars` does not give (or gives
    /// as `null`), unless `allow_missing`
    /// ([`dgem_core::template::render_strict`]). The decision service's
    /// catalogue renders every decision through this.
    ///
    /// # Errors
    /// [`TemplateError::Unset`] naming the variables at fault;
    /// [`TemplateError::Variables`] when rendering or parsing fails otherwise.
    pub fn render_text_strict(
        name: &str,
        text: &str,
        vars: &Map<String, Value>,
        allow_missing: bool,
    ) -> Result<Payload, TemplateError> {
        render_text_with(name, text, vars, |label, text| {
            dgem_core::template::render_strict(label, text, vars, allow_missing)
        })
    }

    /// Render `name` with `render(label, text)` in a traced span, then split
    /// the output into a payload.
    fn render_with(
        &self,
        name: &str,
        vars: &Map<String, Value>,
        render: impl FnOnce(&str, &str) -> Result<String, dgem_core::TemplateError>,
    ) -> Result<Payload, TemplateError> {
        let text = self.text(name)?;
        render_text_with(name, &text, vars, render)
    }

    /// The names of the folder's own templates: every `*.json.tmpl` directly
    /// in it (`name`) and one folder down (`sub/name`; hidden folders are
    /// skipped), sorted as [`TemplateDir::names`] sorts. Empty when the folder
    /// is missing or unreadable.
    pub fn folder_names(&self) -> Vec<String> {
        let mut names = stems(&self.root, "");
        for sub in subfolders(&self.root) {
            names.extend(stems(&self.root.join(&sub), &format!("{sub}/")));
        }
        sort_names(&mut names);
        names
    }

    /// Every name of the catalogue: the folder's ([`TemplateDir::folder_names`])
    /// and the built-in ones it does not have, each once; top-level names
    /// first, then `sub/name` ones, each group by name.
    pub fn names(&self) -> Vec<String> {
        let mut names = self.folder_names();
        for b in builtin_names() {
            if !names.iter().any(|n| n == b) {
                names.push(b.to_string());
            }
        }
        sort_names(&mut names);
        names
    }

    /// The catalog: a summary of every template of [`TemplateDir::names`].
    pub fn list(&self) -> Vec<TemplateSummary> {
        self.names().into_iter().map(|n| self.summary(n)).collect()
    }

    fn summary(&self, name: String) -> TemplateSummary {
        let text = self.text(&name);
        let mut out = TemplateSummary {
            name,
            description: String::new(),
            questions: Vec::new(),
            variables: Vec::new(),
            error: String::new(),
        };
        let text = match text {
            Ok(t) => t,
            Err(e) => {
                out.error = e.to_string();
                return out;
            }
        };
        out.description = leading_comment(&text);
        out.variables = template_variables(&text);
        match self.render(&out.name, &Map::new()) {
            Ok(payload) => out.questions = question_summaries(&payload.schema),
            Err(e) => out.error = e.to_string(),
        }
        out
    }
}

/// `name` trimmed, when it is a plain relative template name.
///
/// # Errors
/// [`TemplateError::Name`] for an empty name, an absolute path, or `..`/`.`
/// components.
fn checked_name(name: &str) -> Result<&str, TemplateError> {
    let named = |why: &str, listable: bool| TemplateError::Name {
        message: format!("{why}. Given: `{name}`"),
        listable,
    };
    let trimmed = name.trim();
    if trimmed.is_empty() {
        return Err(named("must name a template", true));
    }
    let rel = Path::new(trimmed);
    if rel.is_absolute() || trimmed.starts_with('/') || trimmed.starts_with('\\') {
        return Err(named(
            "must be a template name, not an absolute path",
            false,
        ));
    }
    if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(named(
            "must be a plain template name inside the templates folder (no `..`)",
            false,
        ));
    }
    Ok(trimmed)
}

/// Top-level names first, then `sub/name` ones, each group by name.
fn sort_names(names: &mut [String]) {
    names.sort_by(|a, b| (a.contains('/'), a).cmp(&(b.contains('/'), b)));
}

/// `prefix` + the stem of every `*.json.tmpl` file directly in `dir`; empty
/// when `dir` cannot be read (a missing folder is not an error; an unreadable
/// one is logged).
fn stems(dir: &Path, prefix: &str) -> Vec<String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(folder = %dir.display(), error = %e, "templates folder not readable: serving the built-in policies");
            }
            return Vec::new();
        }
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| !e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter_map(|f| {
            f.strip_suffix(TEMPLATE_SUFFIX)
                .map(|s| format!("{prefix}{s}"))
        })
        .collect()
}

/// Names of the visible subfolders of `dir`, sorted; empty when unreadable.
fn subfolders(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut subs: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| !n.starts_with('.'))
        .collect();
    subs.sort();
    subs
}

/// Render `text` (policy `name`) with `render(label, text)` in a traced span,
/// then split the output into a payload.
fn render_text_with(
    name: &str,
    text: &str,
    vars: &Map<String, Value>,
    render: impl FnOnce(&str, &str) -> Result<String, dgem_core::TemplateError>,
) -> Result<Payload, TemplateError> {
    let label = display_name(name);
    let span = tracing::info_span!("template_render", otel.name = "dgem.template.render", template = %label);
    let rendered = span
        .in_scope(|| render(&label, text))
        .map_err(|e| match e {
            dgem_core::TemplateError::Unset { ref missing, .. } => TemplateError::Unset {
                missing: missing.clone(),
                detail: e.to_string(),
            },
            other => TemplateError::Variables(other.to_string()),
        })?;
    parse_named_payload(&label, &rendered, vars)
        .map_err(|e| TemplateError::Variables(e.to_string()))
}

/// The label a template renders under: the file name of `name`
/// (`support_triage.json.tmpl`, `intent_select.json.tmpl` for
/// `bench/intent_select`), whether it comes from the folder or is built in.
fn display_name(name: &str) -> String {
    let trimmed = name.trim();
    let stem = trimmed.strip_suffix(TEMPLATE_SUFFIX).unwrap_or(trimmed);
    let last = stem.rsplit('/').next().unwrap_or(stem);
    format!("{last}{TEMPLATE_SUFFIX}")
}

fn question_summaries(schema: &Value) -> Vec<QuestionSummary> {
    let Some(list) = schema.get("questions").and_then(Value::as_array) else {
        return Vec::new();
    };
    list.iter()
        .map(|q| QuestionSummary {
            id: q
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            kind: q
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        })
        .collect()
}

/// The text of a leading `{{- /* … */ -}}` comment, trimmed.
pub fn leading_comment(text: &str) -> String {
    let t = text.trim_start();
    let Some(rest) = t.strip_prefix("{{") else {
        return String::new();
    };
    let rest = rest.trim_start_matches('-').trim_start();
    let Some(body) = rest.strip_prefix("/*") else {
        return String::new();
    };
    body.split_once("*/")
        .map(|(c, _)| c.trim().to_string())
        .unwrap_or_default()
}

/// Variables a template reads; the one scanner lives in `dgem_core::template`.
pub use dgem_core::template::template_variables;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_variables_and_comment() {
        let t = "{{- /* Route a ticket. Variables: .nope */ -}}\n{\"a\": {{ default 1 .samples | toJson }}, \"b\": {{ .ticket }}, \"c\": {{ .ticket }}}";
        assert_eq!(template_variables(t), vec!["samples", "ticket"]);
        assert_eq!(leading_comment(t), "Route a ticket. Variables: .nope");
    }

    #[test]
    fn refuses_escapes() {
        let dir = TemplateDir::new("templates");
        for bad in ["", "../etc/passwd", "/etc/passwd", "a/../../b", "./x"] {
            assert!(
                matches!(dir.source(bad), Err(TemplateError::Name { .. })),
                "{bad}"
            );
        }
    }
}

#[cfg(test)]
mod catalogue_tests;

#[cfg(test)]
mod hint_tests {
    use super::*;

    #[test]
    fn list_hint_goes_before_the_given_name() {
        let dir = TemplateDir::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../templates"));
        let e = dir.source("nope").expect_err("no such template");
        assert_eq!(
            e.with_list_hint("call list_policy_templates for the names"),
            "template: no such template; call list_policy_templates for the names. Given: `nope`"
        );
        let e = dir.source("../x").expect_err("escape");
        assert_eq!(
            e.with_list_hint("ignored"),
            "template: must be a plain template name inside the templates folder (no `..`). Given: `../x`"
        );
    }
}
