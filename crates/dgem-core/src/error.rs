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
    #[error("{}", crate::template::unset_message(.name, .missing, .given))]
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
