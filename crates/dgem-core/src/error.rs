//! Error types of the core crate.
//!
//! Every message names the offending field, the allowed values and the value
//! received (house style rule 7), and keeps the serving.md §3.1 wording as its
//! prefix so existing clients that match on it still do.

use thiserror::Error;

use crate::tokenizer::TokenizeError;

/// A schema broke a rule of serving.md §3.1 or a slot could not be resolved.
///
/// `field` is a JSON-path-like location (`questions[1].type`, `samples`).
#[derive(Debug, Error, Clone, PartialEq)]
#[error("{message}")]
pub struct SchemaError {
    /// Where the problem is, e.g. `questions[2].options`.
    pub field: String,
    /// Full human-readable message.
    pub message: String,
}

impl SchemaError {
    /// Build an error for `field` with `message`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A template failed to render or its output was not a usable payload.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum TemplateError {
    /// The template text does not parse as Go `text/template`.
    #[error("template `{name}` does not parse: {detail}")]
    Parse {
        /// Template name (file name).
        name: String,
        /// Parser message.
        detail: String,
    },
    /// Executing the template failed (bad function call, missing field…).
    #[error("template `{name}` failed to render: {detail}")]
    Render {
        /// Template name.
        name: String,
        /// Execution message.
        detail: String,
    },
    /// A `-v key=value` or `-d vars.json` input is malformed.
    #[error("variable {detail}")]
    Variable {
        /// What was wrong, naming the key and the value given.
        detail: String,
    },
    /// Variables the template reads with no `default` were not given (or
    /// were `null`): the policy would hold Go's `<no value>` (or `null`) in
    /// their place and be decided on ([`crate::template::render_strict`]).
    #[error("{}", unset_message(.name, .missing, .given))]
    Unset {
        /// Template name.
        name: String,
        /// The variables that would leave a placeholder, in order of first use.
        missing: Vec<String>,
        /// The variables that were given (not `null`).
        given: Vec<String>,
    },
    /// The rendered text is not a JSON object with a schema.
    #[error("rendered template `{name}` is not valid JSON: {detail}")]
    Json {
        /// Template name.
        name: String,
        /// serde_json message with line/column.
        detail: String,
    },
}

/// Any error of the core crate.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum CoreError {
    /// Schema validation or slot resolution failed.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// Template rendering failed.
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// The tokenizer failed.
    #[error(transparent)]
    Tokenize(#[from] TokenizeError),
}

/// A question that cannot be converted; `field` is the path (`questions.urgent`,
/// `questions[2]`), `message` says what is allowed and what was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct AdhocError {
    /// Path of the offending value.
    pub field: String,
    /// What is wrong, with the allowed forms and the value given.
    pub message: String,
}

/// What Go's `text/template` writes for a missing value: the placeholder a
/// policy would be decided on, which [`TemplateError::Unset`] names.
pub(crate) const NO_VALUE: &str = "<no value>";

/// The message of [`TemplateError::Unset`]: template `name`, the variables
/// `missing` (each with the nearest of `given` when one is near), and the
/// variables `given`. It names no transport: callers add how to give a
/// variable (`-v`, `variables`) and how to opt out.
pub(crate) fn unset_message(name: &str, missing: &[String], given: &[String]) -> String {
    let named: Vec<String> = missing
        .iter()
        .map(
            |m| match crate::suggest::closest_variable(m, given.iter().map(String::as_str)) {
                Some(g) => format!("`{m}` (did you misspell it as `{g}`?)"),
                None => format!("`{m}`"),
            },
        )
        .collect();
    let (was, has) = if missing.len() == 1 {
        ("was", "has")
    } else {
        ("were", "have")
    };
    let given = if given.is_empty() {
        "no variables were given".to_string()
    } else {
        format!("the variables given are [{}]", given.join(", "))
    };
    format!(
        "template `{name}` reads {}, which {was} not given and {has} no `default` there, so the policy would be decided on a placeholder ({NO_VALUE}, or null through toJson); {given}",
        named.join(", ")
    )
}
