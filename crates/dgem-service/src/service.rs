//! [`Service`]: the one decision entry of every surface. It prepares a
//! request ([`crate::prepare`]), reads it on a decider and applies the
//! post-read (cascade, temperature, abstention, expansion) exactly once.
//!
//! Admission and bracket routing are the decider's: `dgem serve` hands the
//! service its gated decider (one `MAX_INFLIGHT` budget for every surface),
//! and every backend routes a choice of more than 26 options through its
//! brackets inside `decide`.

use std::sync::Arc;
use std::time::Instant;

use dgem_cascade::{AfterOutcome, AfterSetup};
use dgem_core::schema::SchemaDefaults;
use dgem_engine::{Decider, Decision, EngineError};
use serde_json::{Map, Value};

use crate::catalogue::Catalogue;
use crate::error::ServiceError;
use crate::prepare::{prepare, Prepared};
use crate::request::DecisionRequest;

/// The decision service of one deployment: its catalogue, its schema
/// defaults and its post-read setup (Stage-2 provider, calibration file).
#[derive(Debug, Clone)]
pub struct Service {
    catalogue: Catalogue,
    defaults: SchemaDefaults,
    after: Arc<AfterSetup>,
}

/// A decision with its post-read, as every surface renders it.
#[derive(Debug)]
pub struct Decided {
    /// The template id, or `custom_questions`.
    pub label: String,
    /// The decision, after temperature, abstention and the cascade.
    pub decision: Decision,
    /// What the post-read did (cascade summary, calibration use, suggestions).
    pub after: AfterOutcome,
    /// Wall time of the read and the post-read, in ms.
    pub elapsed_ms: f64,
}

impl Decided {
    /// The reply's `{answers, diagnostics}` envelope with the post-read keys
    /// (`cascade`, `calibration`, `suggested_expansions`) when there are any.
    pub fn envelope(&self) -> Value {
        let mut envelope = self.decision.envelope();
        if let (Some(extra), Some(m)) = (self.after.to_json(), envelope.as_object_mut()) {
            m.extend(extra);
        }
        envelope
    }

    /// The post-read keys alone (empty when the post-read did nothing).
    pub fn extra(&self) -> Map<String, Value> {
        self.after.to_json().unwrap_or_default()
    }
}

/// The post-read of `decision`, made from `prepared`, under a deployment's
/// `after` setup: the cascade, temperature, abstention and expansion that
/// `prepared.after` asks for ([`AfterSetup::run`]). The one post-read
/// call of every surface: [`Service::run_after`] and [`Service::decide`] use it,
/// and so does the chat route, which prepares its request from its own
/// OpenAI-shaped body.
pub async fn run_after(
    after: &AfterSetup,
    prepared: &Prepared,
    decision: &mut Decision,
) -> AfterOutcome {
    for w in &prepared.warnings {
        if !decision.diagnostics.warnings.contains(w) {
            decision.diagnostics.warnings.push(w.clone());
        }
    }
    let state = &prepared.request.state;
    let images = dgem_core::images::image_urls(state);
    after
        .run(
            decision,
            &prepared.request.schema,
            state,
            &images,
            &prepared.after,
        )
        .await
}

impl Service {
    /// A service over `catalogue` with the default schema defaults and no
    /// post-read setup.
    pub fn new(catalogue: Catalogue) -> Self {
        Self {
            catalogue,
            defaults: SchemaDefaults::default(),
            after: Arc::default(),
        }
    }

    /// Validate policies under `defaults` (the deployment's
    /// `DEFAULT_SAMPLES`, `DEFAULT_LAYOUT`, …).
    #[must_use]
    pub fn with_defaults(mut self, defaults: SchemaDefaults) -> Self {
        self.defaults = defaults;
        self
    }

    /// Use the deployment's Stage-2 provider and calibration file.
    #[must_use]
    pub fn with_after(mut self, after: Arc<AfterSetup>) -> Self {
        self.after = after;
        self
    }

    /// The catalogue.
    pub fn catalogue(&self) -> &Catalogue {
        &self.catalogue
    }

    /// The schema defaults policies are validated under.
    pub fn defaults(&self) -> &SchemaDefaults {
        &self.defaults
    }

    /// The post-read setup.
    pub fn after(&self) -> &Arc<AfterSetup> {
        &self.after
    }

    /// [`prepare`] `req` on this service's catalogue and defaults.
    ///
    /// # Errors
    /// The [`ServiceError`] naming the field at fault.
    pub fn prepare(
        &self,
        route_template: Option<&str>,
        req: DecisionRequest,
    ) -> Result<Prepared, ServiceError> {
        prepare(&self.catalogue, route_template, req, &self.defaults)
    }

    /// The post-read of `decision`, made from `prepared`: run once per
    /// decision, by [`Service::decide`] or by a surface that routes the read
    /// itself (the Studio API's backend router).
    pub async fn run_after(&self, prepared: &Prepared, decision: &mut Decision) -> AfterOutcome {
        run_after(&self.after, prepared, decision).await
    }

    /// Read `prepared` on `decider`, then [`Service::run_after`].
    ///
    /// # Errors
    /// The decider's [`EngineError`]; the post-read never fails (a Stage-2
    /// failure is in the cascade summary).
    pub async fn decide(
        &self,
        decider: &dyn Decider,
        prepared: Prepared,
    ) -> Result<Decided, EngineError> {
        let started = Instant::now();
        let mut decision = decider.decide(prepared.request.clone()).await?;
        let after = self.run_after(&prepared, &mut decision).await;
        Ok(Decided {
            label: prepared.label,
            decision,
            after,
            elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
        })
    }
}
