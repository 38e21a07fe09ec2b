//! The policy template folder: name resolution confined to the folder, the
//! catalog for `list_policy_templates`, and rendering into a payload.

use std::path::{Component, Path, PathBuf};

use dgem_core::payload::{parse_named_payload, Payload};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::ToolError;

/// File name ending of a policy template.
pub const TEMPLATE_SUFFIX: &str = ".json.tmpl";

/// A folder of `.json.tmpl` policy templates. Names resolve only inside it.
#[derive(Debug, Clone)]
pub struct TemplateDir {
    root: PathBuf,
}

/// One question of a template, as listed by `list_policy_templates`.
#[derive(Debug, Clone, Serialize)]
pub struct QuestionSummary {
    /// Question id.
    pub id: String,
    /// Question type (`noul`, `choice`, `score`, …).
    #[serde(rename = "type")]
    pub kind: String,
}

/// One catalog entry of `list_policy_templates`.
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
    /// [`ToolError::Template`] for an empty name, an absolute path, `..` or `.`
    /// components, a missing file, or a file (or symlink) outside the folder.
    pub fn resolve(&self, name: &str) -> Result<PathBuf, ToolError> {
        let bad = |why: &str| ToolError::Template(format!("{why}. Given: `{name}`"));
        let trimmed = name.trim();
        if trimmed.is_empty() {
            return Err(bad("must name a template; call list_policy_templates"));
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
        let root = self.root.canonicalize().map_err(|e| {
            ToolError::Template(format!(
                "templates folder {} is not readable: {e}",
                self.root.display()
            ))
        })?;
        let real = file
            .canonicalize()
            .map_err(|_| bad("no such template; call list_policy_templates for the names"))?;
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
    /// placeholder text), naming the closest variable it does read.
    ///
    /// # Errors
    /// [`ToolError::Schema`] (field `variables`) for an unknown variable, and
    /// everything [`TemplateDir::render`] returns.
    pub fn render_checked(
        &self,
        name: &str,
        vars: &Map<String, Value>,
    ) -> Result<Payload, ToolError> {
        let path = self.resolve(name)?;
        let text = std::fs::read_to_string(&path)
            .map_err(|e| ToolError::Template(format!("cannot read `{name}`: {e}")))?;
        let declared = template_variables(&text);
        if let Some(detail) =
            dgem_core::vars::unknown_variables(name, vars.keys().map(String::as_str), &declared)
        {
            return Err(ToolError::Schema {
                field: "variables",
                detail,
            });
        }
        self.render(name, vars)
    }

    /// Render template `name` with `vars` into a payload.
    ///
    /// # Errors
    /// [`ToolError::Template`] when the name does not resolve or the file cannot
    /// be read; [`ToolError::Schema`] (field `variables`) when rendering or
    /// parsing fails.
    pub fn render(&self, name: &str, vars: &Map<String, Value>) -> Result<Payload, ToolError> {
        let path = self.resolve(name)?;
        let text = std::fs::read_to_string(&path)
            .map_err(|e| ToolError::Template(format!("cannot read `{name}`: {e}")))?;
        let label = display_name(&path);
        let rendered =
            dgem_core::template::render(&label, &text, vars).map_err(|e| ToolError::Schema {
                field: "variables",
                detail: e.to_string(),
            })?;
        parse_named_payload(&label, &rendered, vars).map_err(|e| ToolError::Schema {
            field: "variables",
            detail: e.to_string(),
        })
    }

    /// The catalog: every `*.json.tmpl` directly in the folder, sorted by name.
    ///
    /// # Errors
    /// [`ToolError::Template`] when the folder cannot be read.
    pub fn list(&self) -> Result<Vec<TemplateSummary>, ToolError> {
        let entries = std::fs::read_dir(&self.root).map_err(|e| {
            ToolError::Template(format!(
                "templates folder {} is not readable: {e}",
                self.root.display()
            ))
        })?;
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter_map(|f| f.strip_suffix(TEMPLATE_SUFFIX).map(str::to_string))
            .collect();
        names.sort();
        Ok(names.into_iter().map(|n| self.summary(n)).collect())
    }

    fn summary(&self, name: String) -> TemplateSummary {
        let text = self.resolve(&name).and_then(|p| {
            std::fs::read_to_string(p).map_err(|e| ToolError::Template(e.to_string()))
        });
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
                matches!(dir.resolve(bad), Err(ToolError::Template(_))),
                "{bad}"
            );
        }
    }
}
