//! Stage-2 cascade for dgem decisions.
//!
//! Stage 1 (the dgem read) gives a probability for every allowed answer. The
//! answers it hesitates on — entropy at or above a threshold, or (in
//! evaluation runs) answers that miss a known expectation — are escalated to
//! a larger LLM in one call that must answer in structured JSON. Its answers
//! are checked against each question's allowed values and written back over
//! the Stage-1 ones, which keep their distributions. A Stage-2 failure never
//! fails the decision: Stage 1 stands and the summary says why.
//!
//! ```text
//! request keys ──AfterOptions::cascade──▶ CascadeOptions
//! Decision ──gate──▶ escalated slots ──prompt + response_schema──▶ Stage2::resolve
//!          ◀──AnswerOut::resolve── checked reply            ──▶ CascadeSummary
//! ```
//!
//! Providers: [`provider::openai::OpenAiChat`] (OpenAI-compatible servers)
//! and [`provider::vertex::VertexGemini`] (Gemini on Vertex AI), picked with
//! [`provider_from_spec`]. Behaviour follows the original dgem cascade.

pub mod after;
pub mod after_options;
pub mod config;
pub mod error;
pub mod expand;
pub mod gate;
pub mod options;
pub mod prompt;
pub mod provider;
pub mod run;
pub mod summary;

pub use after::{
    inject_if_asked, run_after, AfterOutcome, AfterRequest, AfterSetup, CalibrationUse,
    CASCADE_FAILED,
};
pub use after_options::AfterOptions;
pub use config::{provider_from_spec, Stage2Config};
pub use error::{CascadeError, Stage2Error};
pub use expand::{
    inject_catch_all, is_catch_all, suggest, ExpansionOptions, Suggestion, SuggestionSource,
};
pub use gate::{gate, GateVerdict};
pub use options::{CascadeMode, CascadeOptions, PriorMode, ThresholdMode};
pub use provider::{Secret, Stage2, Stage2Reply, Stage2Request};
pub use run::{cascade, FALLBACK_CONFIDENCE};
pub use summary::{CascadeSummary, SlotSummary};

#[cfg(test)]
mod testutil;
