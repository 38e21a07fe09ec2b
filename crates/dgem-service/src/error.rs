//! Why a decision request was refused before any read.

use dgem_engine::templates::TemplateError;

/// A request the service refuses. Each surface renders it in its own shape
/// (an HTTP status and `error.param`, an MCP tool error, an exit code); the
/// messages already name the field, the allowed values and the value given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// A request field is malformed (HTTP 400).
    #[error("{message}")]
    Field {
        /// The request key at fault (`samples`, `questions[0].type`, …).
        field: String,
        /// The whole message, starting with the field in backticks.
        message: String,
    },
    /// A variable the template does not read (HTTP 400, field
    /// `variables`). The detail names no transport.
    #[error("variables: {0}")]
    Variables(String),
    /// None of the template's state variables given, without
    /// `allow_missing_vars` (HTTP 400, field `variables`): the policy would
    /// be decided on its placeholder text. The detail names no transport.
    #[error("variables: {0}")]
    NoState(String),
    /// The template named does not resolve, cannot be read, or does not
    /// render ([`TemplateError`]; `Unset` is a 422: the request is well
    /// formed but the policy cannot be decided on without the variable).
    #[error("template `{}`: {}", .0.name, .0.error)]
    Template(Box<TemplateFailure>),
    /// The rendered policy or the ad-hoc questions are not a valid schema
    /// (HTTP 400).
    #[error("policy `{policy}` is not a valid schema: {detail}")]
    Schema {
        /// The template id, or `custom_questions`.
        policy: String,
        /// The schema error, naming the question and field.
        detail: String,
    },
}

/// A template that did not resolve or render, with what the request gave.
#[derive(Debug)]
pub struct TemplateFailure {
    /// The template id asked for.
    pub name: String,
    /// What failed.
    pub error: TemplateError,
    /// Variables the template reads that the request does not give.
    pub missing: Vec<String>,
    /// Every variable the template reads.
    pub declared: Vec<String>,
}

impl ServiceError {
    /// A [`ServiceError::Field`] on request key `name`, with the whole
    /// `message` (starting with the field in backticks).
    pub fn field(name: &str, message: String) -> Self {
        Self::Field {
            field: name.to_string(),
            message,
        }
    }

    /// A [`ServiceError::Field`] from a core schema error (its field and message).
    pub fn from_schema_error(e: dgem_core::SchemaError) -> Self {
        Self::Field {
            field: e.field.to_string(),
            message: e.message,
        }
    }
}
