//! The value parsers of [`super::ModelArgs`]'s flags (moved from `setup.rs`
//! unchanged).

use dgem_core::labels::LabelMode;

/// A number of seconds from 0 (no limit) to a day.
pub(crate) fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..=86_400.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "must be a number of seconds from 0 (no limit) to 86400. Given: `{s}`"
        )),
    }
}

pub(super) fn parse_on_off(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "1" | "yes" => Ok(true),
        "off" | "false" | "0" | "no" => Ok(false),
        other => Err(format!("must be one of [on, off]. Given: `{other}`")),
    }
}

pub(super) fn parse_auto_off(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "auto" | "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("must be one of [auto, off]. Given: `{other}`")),
    }
}

pub(super) fn parse_label_mode(s: &str) -> Result<LabelMode, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "words" => Ok(LabelMode::Words),
        "letters" => Ok(LabelMode::Letters),
        other => Err(format!(
            "`labels` must be one of [words, letters]. Given: `{other}`"
        )),
    }
}

/// `--order-debias` as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderDebiasArg {
    /// What was measured best for the model ([`super::order_debias_for`]).
    Auto,
    /// The user's setting.
    Set(dgem_core::order::OrderDebias),
}

/// `--order-debias`: `auto`, or anything
/// [`dgem_core::order::OrderDebias::parse`] reads.
pub(super) fn parse_order_debias(s: &str) -> Result<OrderDebiasArg, String> {
    if s.trim().eq_ignore_ascii_case("auto") {
        return Ok(OrderDebiasArg::Auto);
    }
    dgem_core::order::OrderDebias::parse(s)
        .map(OrderDebiasArg::Set)
        .map_err(|e| e.replace("[off, cyclic, prior]", "[auto, off, cyclic, prior]"))
}

/// `--wording` as given: which fixed sentences the question block uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WordingArg {
    /// What was measured for the model ([`super::wording_for`]):
    /// `compact` where its catalogue entry says so, else `standard`.
    Auto,
    /// dgem's own sentences (`dgem_core::prompt::Wording::default`).
    Standard,
    /// The answer format stated before the questions
    /// (`dgem_core::prompt::Wording::compact`).
    Compact,
}

/// `--wording`: `auto`, `standard` or `compact`.
pub(super) fn parse_wording(s: &str) -> Result<WordingArg, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "auto" => Ok(WordingArg::Auto),
        "standard" => Ok(WordingArg::Standard),
        "compact" => Ok(WordingArg::Compact),
        _ => Err(format!(
            "must be one of [auto, standard, compact]. Given: `{s}`"
        )),
    }
}
