//! The warm-up: one real decision through the engine at start-up, then (with
//! `warm_priors`) the calibration priors of the template folder
//! ([`crate::priors`]); readiness turns true only when the decision succeeds
//! and the priors are done (phase `warming_priors` meanwhile).

use std::time::{Duration, Instant};

use dgem_core::schema::ValidSchema;
use dgem_engine::DecideRequest;
use serde_json::json;

use crate::state::{unix_now, AppState, Readiness};

/// Attempts before giving up (with 1 s, 2 s, … pauses between them).
pub const ATTEMPTS: u32 = 3;

/// Run the warm-up decision (retrying a few times) and update readiness.
///
/// # Errors
/// The last failure's message, after every attempt failed; readiness is then
/// `warmup_failed`.
pub async fn run(state: &AppState) -> Result<(), String> {
    let started = Instant::now();
    let schema = json!({
        "questions": [{"id": "warm", "type": "noul", "instructions": "Is this a warm-up request?"}]
    });
    let schema = ValidSchema::from_value(&schema, &state.config().schema_defaults)
        .map_err(|e| format!("warm-up schema: {e}"))?;
    // A model still loading behind the bound port (`crate::loading`) is waited
    // for; the attempts start once it is in place (or failed).
    while state.decider().health().await.is_warming()
        && state.decider().info().runtime == crate::loading::PLACEHOLDER_RUNTIME
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut last = String::new();
    for attempt in 1..=ATTEMPTS {
        let req = DecideRequest {
            schema: schema.clone(),
            state: json!({"message": "warm-up"}),
            seed: 42,
        };
        match state.decider().decide(req).await {
            Ok(_) => {
                let priors_warmed = match &state.config().warm_priors {
                    Some(dir) => {
                        state.set_readiness(Readiness {
                            phase: "warming_priors".into(),
                            ready: false,
                            warmup_s: None,
                            ready_ts: None,
                            error: None,
                            priors_warmed: None,
                        });
                        let report = crate::priors::warm(state, dir).await;
                        tracing::info!(
                            warmed = report.warmed.len(),
                            skipped = report.skipped.len(),
                            "warm-priors done"
                        );
                        Some(report.warmed.len())
                    }
                    None => None,
                };
                let secs = started.elapsed().as_secs_f64();
                tracing::info!(warmup_s = secs, "warm-up done: ready");
                state.set_readiness(Readiness {
                    phase: "ready".into(),
                    ready: true,
                    warmup_s: Some(secs),
                    ready_ts: Some(unix_now()),
                    error: None,
                    priors_warmed,
                });
                return Ok(());
            }
            Err(e) => {
                tracing::warn!(attempt, error = %e, "warm-up decision failed");
                last = e.to_string();
                if attempt < ATTEMPTS {
                    tokio::time::sleep(Duration::from_secs(u64::from(attempt))).await;
                }
            }
        }
    }
    state.set_readiness(Readiness {
        phase: "warmup_failed".into(),
        ready: false,
        warmup_s: Some(started.elapsed().as_secs_f64()),
        ready_ts: None,
        error: Some(last.clone()),
        priors_warmed: None,
    });
    Err(last)
}
