//! The files of `dgem batch`: every row of a JSON Lines, CSV or OpenAI Batch
//! file decided under one policy, one output line per input row, in input
//! order.
//!
//! - [`input`] reads the rows one at a time (a 200,000-row file is never held
//!   in memory) and turns each into what it asks for: template variables, a
//!   state for ad-hoc questions, or an OpenAI chat-completions body. A row
//!   that cannot be read becomes a [`input::RowError`] naming its field; it
//!   never stops the job.
//! - [`journal`] owns the output file. Lines are appended in input order and
//!   flushed as they are written, so the output is also the journal: a run
//!   killed at any point (SIGKILL included) and started again with the same
//!   arguments keeps every complete line, drops a line cut short, and goes on
//!   from the first row without a line. A sidecar file holds the
//!   fingerprint of the arguments; an output written under other arguments is
//!   refused rather than mixed.
//! - [`dedupe`] gives each row's content hash: identical rows of a run are
//!   decided once and the later ones point at the first (`duplicate_of`).
//!
//! - [`calibrate`] is batch calibration over a finished run, and
//!   [`rescore`] applies it to benchmark receipts to measure it.
//!
//! The split across machines is [`crate::shard`]'s: a row belongs to shard
//! `sha256(id) mod N`, the same split as the benchmark shards, and
//! [`journal::merge`] joins the shards' outputs back into input order.

pub mod calibrate;
pub mod dedupe;
pub mod input;
pub mod journal;
pub mod rescore;
