//! [`MultiRead`], the reads of a `multi` answer, in a file of its own: an
//! answer ([`crate::envelope::AnswerOut`]) holds one, and the rest of
//! `multi.rs` reads answers and schemas, so keeping the type here lets the
//! answer depend on it without depending on them.

use serde::Serialize;

use crate::readout::Aggregate;

/// A `multi` answer's reads: one yes/no aggregate per option, and the
/// options selected.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MultiRead {
    /// Per option, in option order: the `[yes, no]` aggregate of its slot.
    pub options: Vec<Aggregate>,
    /// Selected options (indices), in option order.
    pub selected: Vec<usize>,
}

impl MultiRead {
    /// Each option's probability of applying, in [0, 1], in option order.
    pub fn applies(&self) -> Vec<f64> {
        self.options
            .iter()
            .map(|a| a.mean.first().copied().unwrap_or(0.0))
            .collect()
    }
}
