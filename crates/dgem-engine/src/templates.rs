//! The policy template folder, shared by every transport (HTTP `/api`, MCP,
//! the CLI): name resolution confined to the folder, the catalog, rendering
//! into a payload, and "render → payload → [`ValidSchema`] under the
//! deployment's [`SchemaDefaults`]" in one call ([`TemplateDir::render_schema`]).
//!
//! Messages here name no transport: a caller adds its own hint for listing the
//! templates ([`TemplateError::with_list_hint`]), e.g. the MCP tool name or the
//! HTTP route.

use std::path::{Component, Path, PathBuf};

use dgem_core::payload::{parse_named_payload, Payload};
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use serde::Serialize;
use serde_json::{Map, Value};

/// Why a template could not be found, read, rendered or validated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TemplateError {
    /// The name resolves to no usable template file, or the folder cannot be
    /// read. `listable` is true when listing the folder's names would help.
    #[error("template: {message}")]
    Name {
        /// What is wrong, with the name given.
        message: String,
        /// Whether a "list the templates" hint fits this failure.
        listable: bool,
    },
    /// The variables are unknown to the template, or rendering with them, or
    /// parsing the rendered text, failed (field `variables`).
    #[error("variables: {0}")]
    Variables(String),
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

/// A folder of `.json.tmpl` policy templates. Names resolve only inside it.
#[derive(Debug, Clone)]
pub struct TemplateDir {
    root: PathBuf,
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

/// One catalog entry of a template folder (the MCP `list_policy_templates`).
#[derive(Debug, Clone, Serialize)]
pub struct TemplateSummary {
    /// Name to pass as `template` (file name without `.json.tmpl`).
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
    /// A template folder at `root` (need not exist yet).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolve a template name (`support_triage` or `support_triage.json.tmpl`)
    /// to a file inside the folder.
    ///
    /// # Errors
    /// [`TemplateError::Name`] for an empty name, an absolute path, `..` or `.`
    /// components, a missing file, or a file (or symlink) outside the folder.
    pub fn resolve(&self, name: &str) -> Result<PathBuf, TemplateError> {
        let named = |why: &str, listable: bool| TemplateError::Name {
            message: format!("{why}. Given: `{name}`"),
            listable,
        };
        let bad = |why: &str| named(why, false);
        let trimmed = name.trim();
        if trimmed.is_empty() {
            return Err(named("must name a template", true));
        }
        let rel = Path::new(trimmed);
        if rel.is_absolute() || trimmed.starts_with('/') || trimmed.starts_with('\\') {
            return Err(bad("must be a template name, not an absolute path"));
        }
        if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(bad(
                "must be a plain template name inside the templates folder (no `..`)",
            ));
        }
        let file = if trimmed.ends_with(TEMPLATE_SUFFIX) {
            self.root.join(rel)
        } else {
            self.root.join(format!("{trimmed}{TEMPLATE_SUFFIX}"))
        };
        let root = self.root.canonicalize().map_err(|e| self.unreadable(&e))?;
        let real = file
            .canonicalize()
            .map_err(|_| named("no such template", true))?;
        if !real.starts_with(&root) {
            return Err(bad("resolves outside the templates folder"));
        }
        if !real.is_file() {
            return Err(bad("is not a template file"));
        }
        Ok(real)
    }

    /// Like [`TemplateDir::render`], but first refuses variables the template
    /// does not read (a misspelled name would otherwise render the template's
    /// placeholder text), naming the closest variable it does read, and a
    /// request that gives none of the template's state variables
    /// ([`dgem_core::vars::missing_state_variables`]).
    ///
    /// # Errors
    /// [`TemplateError::Variables`] for an unknown variable, and everything
    /// [`TemplateDir::render`] returns.
    pub fn render_checked(
        &self,
        name: &str,
        vars: &Map<String, Value>,
    ) -> Result<Payload, TemplateError> {
        let text = self.text(name)?;
        let declared = template_variables(&text);
        if let Some(detail) =
            dgem_core::vars::unknown_variables(name, vars.keys().map(String::as_str), &declared)
        {
            return Err(TemplateError::Variables(detail));
        }
        if let Some(detail) = dgem_core::vars::missing_state_variables(name, vars, &declared) {
            return Err(TemplateError::Variables(detail));
        }
        self.render(name, vars)
    }

    /// Render `name` with `vars` ([`TemplateDir::render_checked`]) and validate
    /// the policy under `defaults`, the deployment's `DEFAULT_SAMPLES`,
    /// `DEFAULT_LAYOUT`, … (a field the policy sets wins over its default).
    ///
    /// # Errors
    /// Everything [`TemplateDir::render_checked`] returns, and
    /// [`TemplateError::Schema`] when the rendered policy is not a valid schema.
    pub fn render_schema(
        &self,
        name: &str,
        vars: &Map<String, Value>,
        defaults: &SchemaDefaults,
    ) -> Result<(Payload, ValidSchema), TemplateError> {
        let payload = self.render_checked(name, vars)?;
        let policy = name.trim().trim_end_matches(TEMPLATE_SUFFIX).to_string();
        let schema = ValidSchema::from_value(&payload.schema, defaults).map_err(|e| {
            TemplateError::Schema {
                name: policy.clone(),
                detail: e.to_string(),
            }
        })?;
        Ok((payload, schema.with_policy(policy)))
    }

    /// The text of template `name`.
    ///
    /// # Errors
    /// [`TemplateError::Name`] when the name does not resolve or the file
    /// cannot be read.
    pub fn text(&self, name: &str) -> Result<String, TemplateError> {
        let path = self.resolve(name)?;
        std::fs::read_to_string(&path).map_err(|e| TemplateError::Name {
            message: format!("cannot read `{name}`: {e}"),
            listable: false,
        })
    }

    fn unreadable(&self, e: &std::io::Error) -> TemplateError {
        TemplateError::Name {
            message: format!(
                "templates folder {} is not readable: {e}",
                self.root.display()
            ),
            listable: false,
        }
    }

    /// Render template `name` with `vars` into a payload.
    ///
    /// # Errors
    /// [`TemplateError::Name`] when the name does not resolve or the file
    /// cannot be read; [`TemplateError::Variables`] when rendering or parsing
    /// fails.
    pub fn render(&self, name: &str, vars: &Map<String, Value>) -> Result<Payload, TemplateError> {
        let path = self.resolve(name)?;
        let text = self.text(name)?;
        let label = display_name(&path);
        let span = tracing::info_span!("template_render", otel.name = "dgem.template.render", template = %label);
        let rendered = span
            .in_scope(|| dgem_core::template::render(&label, &text, vars))
            .map_err(|e| TemplateError::Variables(e.to_string()))?;
        parse_named_payload(&label, &rendered, vars)
            .map_err(|e| TemplateError::Variables(e.to_string()))
    }

    /// The catalog: every `*.json.tmpl` directly in the folder, sorted by name.
    ///
    /// # Errors
    /// [`TemplateError::Name`] when the folder cannot be read.
    pub fn list(&self) -> Result<Vec<TemplateSummary>, TemplateError> {
        let entries = std::fs::read_dir(&self.root).map_err(|e| self.unreadable(&e))?;
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter_map(|f| f.strip_suffix(TEMPLATE_SUFFIX).map(str::to_string))
            .collect();
        names.sort();
        Ok(names.into_iter().map(|n| self.summary(n)).collect())
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

fn display_name(path: &Path) -> String {
    path.file_name()
        .and_then(|f| f.to_str())
        .unwrap_or("template")
        .to_string()
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
                matches!(dir.resolve(bad), Err(TemplateError::Name { .. })),
                "{bad}"
            );
        }
    }
}

#[cfg(test)]
mod hint_tests {
    use super::*;

    #[test]
    fn list_hint_goes_before_the_given_name() {
        let dir = TemplateDir::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../templates"));
        let e = dir.resolve("nope").expect_err("no such template");
        assert_eq!(
            e.with_list_hint("call list_policy_templates for the names"),
            "template: no such template; call list_policy_templates for the names. Given: `nope`"
        );
        let e = dir.resolve("../x").expect_err("escape");
        assert_eq!(
            e.with_list_hint("ignored"),
            "template: must be a plain template name inside the templates folder (no `..`). Given: `../x`"
        );
    }

    #[test]
    fn render_schema_applies_deployment_defaults() {
        let root = std::env::temp_dir().join(format!("dgem-tmpl-{}", std::process::id()));
        std::fs::create_dir_all(&root).expect("temp folder");
        let policy = r#"{"state": {{ .ticket | toJson }}, "questions": [{"id": "urgent", "type": "boolean", "question": "Is it urgent?"}]}"#;
        std::fs::write(root.join("plain.json.tmpl"), policy).expect("write template");
        let dir = TemplateDir::new(&root);
        let mut vars = Map::new();
        vars.insert("ticket".into(), Value::String("refund please".into()));
        let defaults = SchemaDefaults {
            samples: dgem_core::schema::SamplePolicy::Fixed { n: 3 },
            ..SchemaDefaults::default()
        };
        let (_, schema) = dir
            .render_schema("plain", &vars, &defaults)
            .expect("renders");
        assert_eq!(
            schema.samples,
            dgem_core::schema::SamplePolicy::Fixed { n: 3 }
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
