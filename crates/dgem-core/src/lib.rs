//! # dgem-core
//!
//! The pure, synchronous heart of dgem. Nothing here does I/O, spawns threads or
//! knows about a model runtime; every function is deterministic.
//!
//! Pipeline, in module order:
//!
//! 1. [`template`] renders a `.json.tmpl` policy (Go `text/template` syntax) with
//!    variables from [`vars`].
//! 2. [`payload`] splits the rendered JSON into a raw schema and a state and
//!    normalizes the schema's aliases (reference.md §1.1).
//! 3. [`schema`] validates the raw schema into a [`schema::ValidSchema`]
//!    (reference.md §1.3–1.5, serving.md §3.1); only the validator can build one.
//! 4. [`stages`] schedules questions into stages from `depends_on` / `ask_if`.
//! 5. [`labels`] and [`prompt`] build the label alphabets and the prompt text;
//!    [`slots`] resolves each question's answer slot through a [`tokenizer::Tokenizer`].
//! 6. [`readout`] turns slot logits into restricted-softmax distributions, entropy
//!    (nats), hesitation (normalized entropy), agreement and stderr; [`envelope`]
//!    writes the `{answers, diagnostics}` JSON of serving.md §8.
//! 7. [`walk`] keeps the stage walker's bookkeeping (skips, groups, prefill
//!    lines, tops, the one diagnostics builder) that every reader shares.
//!
//! Dependency graph: `dgem-core` ← `dgem-backend` ← backends; `dgem-engine` uses both.
//!
//! ```
//! use dgem_core::readout::restricted_softmax;
//! let p = restricted_softmax(&[0.0, 0.0]);
//! assert!((p[0] - 0.5).abs() < 1e-12);
//! ```
#![deny(missing_docs)]

pub mod adhoc;
pub mod after;
pub mod brackets;
pub mod envelope;
pub mod error;
pub mod image_state;
pub mod images;
pub mod json;
#[cfg(feature = "schemars")]
pub mod keys;
pub mod kinds;
pub mod labels;
pub mod order;
pub mod payload;
pub mod prompt;
pub mod readout;
pub mod rules;
pub mod schema;
pub mod slots;
pub mod stages;
pub mod state;
pub mod suggest;
pub mod template;
pub mod tokenizer;
pub mod vars;
pub mod walk;
pub mod words;

pub use error::{CoreError, SchemaError, TemplateError};
/// `multi` questions' read (one yes/no slot per option), where other crates find it.
pub use kinds::multi;
