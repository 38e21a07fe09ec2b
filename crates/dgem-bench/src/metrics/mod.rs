//! Metric functions shared by the harnesses. Every formula names its source.

pub mod calibration;
pub mod jevbench;
pub mod ranking;
pub mod stats;

pub use calibration::{
    auroc, brier, chance_corrected, coverage_curve, ece_10bin, nll, reliability_bins,
    selective_accuracy_auc, CoveragePoint, ReliabilityBin,
};
pub use ranking::{expectation_score, mrr_at, ndcg_at, p_mrr, recall_at, tie_rate};
pub use stats::{jsd, mcnemar, mean, percentile, tvd, McNemar};

#[cfg(test)]
mod props;
