//! Wire shapes of the routes, for the OpenAPI document. Field names are the
//! wire's; the handlers' own checks (and their error messages) are the
//! authority on what is accepted.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use dgem_cascade::options::{CascadeSwitch, PriorMode, ThresholdMode};
use dgem_core::schema::QuestionKind;

/// `POST /v1/chat/completions` body.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChatCompletionRequest {
    /// Echoed in the reply (default `dgemma-structured`).
    pub model: Option<String>,
    /// Exactly `[system: schema JSON, user: state]`; or, with a `json_schema`
    /// `response_format`, any system/developer/user/assistant messages.
    pub messages: Vec<ChatMessage>,
    /// Seed of the read (default 42).
    pub seed: Option<i64>,
    /// Answer as server-sent events.
    pub stream: Option<bool>,
    /// Only with `stream: true`.
    pub stream_options: Option<StreamOptions>,
    /// `json_schema`: the properties (booleans, enums, bounded integers) are
    /// the questions, and the reply is an object in the schema's shape.
    pub response_format: Option<ResponseFormat>,
    /// Gateway routing: the backend to use.
    pub backend: Option<String>,
    /// Gateway routing: a Vertex endpoint URL.
    pub vertex_url: Option<String>,
    /// Post-hoc temperature by question type (`{"choice": 1.5}`) or one number.
    pub temperature_by_type: Option<Value>,
    /// Withhold answers whose confidence is below this (number or by question id).
    pub abstain_below: Option<Value>,
    /// Withhold answers whose hesitation is at or above this.
    pub abstain_above: Option<Value>,
    /// Cascade: escalate hesitant answers to a Stage-2 model (default `off`).
    pub cascade_mode: Option<CascadeSwitch>,
    /// Gate threshold: an entropy in nats (default 0.35) or, with
    /// `cascade_threshold_mode: normalized`, a hesitation in [0, 1] (default 0.16).
    pub cascade_threshold: Option<f64>,
    /// What `cascade_threshold` is compared with (default `nats`).
    pub cascade_threshold_mode: Option<ThresholdMode>,
    /// The Stage-2 model.
    pub cascade_model: Option<String>,
    /// How much of Stage 1 the Stage-2 prompt shows (default `soft`).
    pub stage2_prior: Option<PriorMode>,
    /// Expected answers by question id (scored in the cascade summary).
    pub expected_answers: Option<Value>,
    /// No effect on a decision (named in `X-DGem-Ignored-Fields`); 0 to 2,
    /// as OpenAI takes it.
    #[schema(minimum = 0.0, maximum = 2.0)]
    pub temperature: Option<f64>,
    /// No effect (named in `X-DGem-Ignored-Fields`); 0 to 1.
    #[schema(minimum = 0.0, maximum = 1.0)]
    pub top_p: Option<f64>,
    /// No effect (named in `X-DGem-Ignored-Fields`); a whole number ≥ 1, or
    /// -1 for no limit.
    pub max_tokens: Option<i64>,
    /// No effect (named in `X-DGem-Ignored-Fields`); a whole number ≥ 1, or
    /// -1 for no limit.
    pub max_completion_tokens: Option<i64>,
    /// No effect (named in `X-DGem-Ignored-Fields`); -2 to 2.
    #[schema(minimum = -2.0, maximum = 2.0)]
    pub presence_penalty: Option<f64>,
    /// No effect (named in `X-DGem-Ignored-Fields`); -2 to 2.
    #[schema(minimum = -2.0, maximum = 2.0)]
    pub frequency_penalty: Option<f64>,
    /// No effect (named in `X-DGem-Ignored-Fields`).
    pub user: Option<String>,
    /// No effect (named in `X-DGem-Ignored-Fields`).
    pub metadata: Option<Value>,
    /// No effect (named in `X-DGem-Ignored-Fields`).
    pub store: Option<bool>,
    /// No effect (named in `X-DGem-Ignored-Fields`).
    pub service_tier: Option<String>,
    /// Must be 1 when given.
    pub n: Option<u64>,
}

/// One chat message.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChatMessage {
    /// `system`, `developer`, `user` or `assistant`.
    pub role: String,
    /// Text, or a list of parts (`{type: text, text}`, `{type: image_url, image_url: {url}}`).
    pub content: Value,
}

/// `stream_options`.
#[derive(Debug, Serialize, ToSchema)]
pub struct StreamOptions {
    /// End the stream with a usage chunk.
    pub include_usage: Option<bool>,
}

/// `response_format`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ResponseFormat {
    /// `json_schema` or `text` (`json_object` is refused: no schema to decide on).
    #[serde(rename = "type")]
    pub kind: String,
    /// With `json_schema`.
    pub json_schema: Option<JsonSchemaFormat>,
}

/// `response_format.json_schema`.
#[derive(Debug, Serialize, ToSchema)]
pub struct JsonSchemaFormat {
    /// Name of the reply type.
    pub name: Option<String>,
    /// An object schema whose properties are `{"type": "boolean"}`, `{"enum": [...]}`
    /// or `{"type": "integer", "minimum": A, "maximum": B}` (local `$ref`s followed).
    pub schema: Value,
    /// Accepted; every property is always answered.
    pub strict: Option<bool>,
}

/// The `chat.completion` reply.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChatCompletion {
    /// `chatcmpl-<ms>`.
    pub id: String,
    /// `chat.completion`.
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    /// The request's `model`.
    pub model: String,
    /// One choice.
    pub choices: Vec<ChatChoice>,
    /// Token counts.
    pub usage: Usage,
    /// With a `json_schema` response format: the decision envelope.
    pub dgem: Option<Envelope>,
}

/// The one choice of a reply.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChatChoice {
    /// 0.
    pub index: u32,
    /// The answer.
    pub message: AssistantMessage,
    /// `stop`.
    pub finish_reason: String,
}

/// The assistant message of a reply.
#[derive(Debug, Serialize, ToSchema)]
pub struct AssistantMessage {
    /// `assistant`.
    pub role: String,
    /// The envelope as pretty JSON text; or, with a `json_schema` response
    /// format, the requested object as JSON text.
    pub content: String,
}

/// Token counts.
#[derive(Debug, Serialize, ToSchema)]
pub struct Usage {
    /// Prompt length of the longest read.
    pub prompt_tokens: u64,
    /// Output rows of the decision (answer templates and thought tokens).
    pub completion_tokens: u64,
    /// The sum.
    pub total_tokens: u64,
}

/// The decision envelope.
#[derive(Debug, Serialize, ToSchema)]
pub struct Envelope {
    /// One answer per question id (`null` for a question skipped by `ask_if`).
    pub answers: BTreeMap<String, Answer>,
    /// Timing, reads, samples, prompt wording, the model.
    pub diagnostics: Value,
}

/// `label`: a string, or for a multi answer a list of strings.
fn label_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, Type};
    Schema::OneOf(
        OneOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::String))
            .item(ArrayBuilder::new().items(ObjectBuilder::new().schema_type(Type::String)))
            .build(),
    )
}

/// The wire names of the question types, `` `noul`, `choice`, `score` or
/// `multi` ``, from dgem-core's list of types (`QuestionKind::ALL`), so a
/// new type is described here with no change.
fn kind_names() -> String {
    dgem_core::words::joined_or(&QuestionKind::ALL.map(QuestionKind::wire_name), '`')
}

/// An answer's `type`: a string, the wire name of its question's type.
fn answer_kind_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
    Schema::Object(
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(format!("{}.", kind_names())))
            .build(),
    )
}

/// A `/v1/systemone` question's `type`: a wire name, or any other spelling
/// of a type.
fn question_kind_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
    Schema::Object(
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(format!(
                "{} (`multi` is a dgem-rs extension); every spelling is accepted: {}.",
                kind_names(),
                QuestionKind::accepted_names()
            )))
            .build(),
    )
}

/// One answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct Answer {
    /// The question's type: its wire name (`noul`, `choice`, …).
    #[serde(rename = "type")]
    #[schema(schema_with = answer_kind_schema)]
    pub kind: String,
    /// The answer's name (`yes`, an option or level name); for a multi, the
    /// list of options selected.
    #[schema(schema_with = label_schema)]
    pub label: Value,
    /// Probability of the chosen answer, in [0, 1]; for a multi, of exactly
    /// the selected set.
    pub confidence: f64,
    /// One probability per allowed answer, by name; they sum to 1. For a
    /// multi, each option's own probability of applying.
    pub probabilities: BTreeMap<String, f64>,
    /// Entropy of `probabilities`, nats; for a multi, the sum of the
    /// options' own yes/no entropies Σ H(p_i).
    pub entropy: f64,
    /// Hesitation: entropy / ln K, in [0, 1]; for a multi, entropy / (K·ln 2).
    pub normalized_entropy: f64,
    /// Boolean: p(yes).
    pub noul: Option<f64>,
    /// Choice: the most probable option.
    pub choice: Option<String>,
    /// Score: the 1-based expected level position.
    pub score: Option<f64>,
    /// Score: the most probable level.
    pub level: Option<String>,
    /// Score with numeric levels: the expected level value.
    pub value: Option<f64>,
    /// Multi: the options selected.
    pub multi: Option<Vec<String>>,
    /// Choice or multi: `true` when the "none of these" option is the answer.
    pub none_of_these: Option<bool>,
    /// Multi: each option's own entropy, nats.
    pub option_entropy: Option<BTreeMap<String, f64>>,
    /// Multi: each option's hesitation, entropy / ln 2.
    pub option_hesitation: Option<BTreeMap<String, f64>>,
    /// Set when the policy's rules changed the answer.
    pub constrained: Option<bool>,
    /// The probability mass the rules removed, in [0, 1].
    pub constraint_mass_removed: Option<f64>,
    /// With several reads: standard error of the top probability.
    pub stderr: Option<f64>,
    /// With several reads: share of reads that agree with the answer.
    pub agreement: Option<f64>,
    /// Set when the answer is withheld.
    pub abstained: Option<bool>,
    /// Why it was withheld.
    pub abstain_reason: Option<String>,
}

/// `POST /v1/systemone` body.
#[derive(Debug, Serialize, ToSchema)]
pub struct SystemOneRequest {
    /// Echo only; the reply names the server's model.
    pub model: Option<String>,
    /// What the questions are about.
    pub state: Value,
    /// Questions by id (or a list with `id`s).
    pub questions: BTreeMap<String, SystemOneQuestion>,
    /// Seed (default 42).
    pub seed: Option<i64>,
    /// Image URLs (`data:` or `https:`), on a backend that reads images.
    pub images: Option<Vec<String>>,
    /// Schema keys: rubric, samples, layout… (as in a policy).
    pub instructions: Option<String>,
    /// Reads averaged: a count or `auto`.
    pub samples: Option<Value>,
    /// dgem-rs extension: rules between the answers (`{"if": …, "then": …}`,
    /// `{"if": …, "not": …}`).
    pub rules: Option<Vec<Value>>,
}

/// A `/v1/systemone` question.
#[derive(Debug, Serialize, ToSchema)]
pub struct SystemOneQuestion {
    /// The question's type (`noul`, `choice`, …, or another spelling).
    #[serde(rename = "type")]
    #[schema(schema_with = question_kind_schema)]
    pub kind: String,
    /// The question text.
    pub instructions: Option<String>,
    /// Options (choice, multi), `{true, false}` descriptions (noul) or levels (score).
    pub criteria: Option<Value>,
    /// Choice or multi (extension): add a real "none of these" option.
    pub none_of_these: Option<bool>,
    /// Multi (extension): fewest options to select.
    pub min: Option<u32>,
    /// Multi (extension): most options to select.
    pub max: Option<u32>,
    /// Multi (extension): probability at or above which an option is selected.
    pub threshold: Option<f64>,
}

/// `POST /v1/systemone` reply.
#[derive(Debug, Serialize, ToSchema)]
pub struct SystemOneResponse {
    /// The served model.
    pub model: String,
    /// Answers by question id (scores 0-based, with a `legend`).
    pub answers: BTreeMap<String, Value>,
    /// `input_tokens`, `output_tokens`.
    pub usage: Value,
    /// As in the envelope.
    pub diagnostics: Value,
}

/// `GET /v1/models` reply.
#[derive(Debug, Serialize, ToSchema)]
pub struct ModelList {
    /// `list`.
    pub object: String,
    /// The served model.
    pub data: Vec<ModelEntry>,
}

/// One model.
#[derive(Debug, Serialize, ToSchema)]
pub struct ModelEntry {
    /// The served model name.
    pub id: String,
    /// `model`.
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    /// `dgem`.
    pub owned_by: String,
}

/// Every error, on every route.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The error detail.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// What went wrong, naming the field, the allowed values and the value given.
    pub message: String,
    /// `invalid_request_error`, `validation_error`, `authentication_error`, …
    #[serde(rename = "type")]
    pub kind: String,
    /// Path of the field at fault, when one is (`messages[0].content`).
    pub param: Option<String>,
}

/// A JSON-RPC 2.0 request to `/mcp`.
#[derive(Debug, Serialize, ToSchema)]
pub struct JsonRpcRequest {
    /// `2.0`.
    pub jsonrpc: String,
    /// Request id (absent on a notification).
    pub id: Option<Value>,
    /// `initialize`, `tools/list`, `tools/call`, …
    pub method: String,
    /// Method parameters.
    pub params: Option<Value>,
}
