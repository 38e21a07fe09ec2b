//! [`Service`]: the one decision entry of every surface. It prepares a
//! request ([`crate::prepare`]), reads it through a [`Route`] and applies the
//! post-read (cascade, temperature, abstention, expansion) exactly once:
//! [`Service::decide_on`] is the one call that reaches a model.
//!
//! Admission and backend routing are the route's (`dgem serve`'s gate, the
//! gateway's failover); bracket routing of a choice of more than 26 options
//! is every backend's, inside its read.

use std::sync::Arc;
use std::time::Instant;

use dgem_cascade::{AfterOutcome, AfterSetup};
use dgem_core::schema::SchemaDefaults;
use dgem_engine::{DecideError, Decider, Decision};
use serde_json::{Map, Value};

use crate::catalogue::Catalogue;
use crate::error::ServiceError;
use crate::prepare::{prepare, Prepared};
use crate::request::DecisionRequest;
use crate::route::{Direct, Route, RouteFacts};

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
    /// How the read went: the backend, attempts and times.
    pub route: RouteFacts,
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

/// `warnings` (the request's, e.g. the text variables an image stood in for)
/// added to the decision's `diagnostics.warnings`, each once.
fn add_warnings(decision: &mut Decision, warnings: &[String]) {
    for w in warnings {
        if !decision.diagnostics.warnings.contains(w) {
            decision.diagnostics.warnings.push(w.clone());
        }
    }
}

/// The post-read of `decision`, made from `prepared`, under a deployment's
/// `after` setup: the cascade, temperature, abstention and expansion that
/// `prepared.after` asks for ([`AfterSetup::run`]). The one post-read call,
/// made once per decision by [`Service::decide_on`].
async fn run_after(
    after: &AfterSetup,
    prepared: &Prepared,
    decision: &mut Decision,
) -> AfterOutcome {
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

    /// Read `prepared` on one `decider`, in process ([`Direct`]), then
    /// its post-read.
    ///
    /// # Errors
    /// The decider's [`DecideError`]; the post-read never fails (a Stage-2
    /// failure is in the cascade summary).
    pub async fn decide(
        &self,
        decider: &dyn Decider,
        prepared: Prepared,
    ) -> Result<Decided, DecideError> {
        self.decide_on(&Direct(decider), prepared).await
    }

    /// Read `prepared` through `route`, on the backend it names, then apply
    /// its post-read once: the one call of every surface that reaches a
    /// model. A policy given inline in the structured server's protocol
    /// ([`Prepared::after_when_asked`]) gets a post-read only when the
    /// request asks for one.
    ///
    /// # Errors
    /// The route's failure; the post-read never fails (a Stage-2 failure is
    /// in the cascade summary).
    pub async fn decide_on<R: Route + ?Sized>(
        &self,
        route: &R,
        prepared: Prepared,
    ) -> Result<Decided, R::Error> {
        let started = Instant::now();
        let asked = !prepared.after.is_empty() || prepared.after.expansion.is_some();
        if prepared.after_when_asked && !asked {
            // No post-read: the request is read as it is, not copied.
            let Prepared {
                label,
                request,
                backend,
                warnings,
                ..
            } = prepared;
            let routed = route.read(backend.as_deref(), request).await?;
            let mut decision = routed.decision;
            add_warnings(&mut decision, &warnings);
            return Ok(Decided {
                label,
                decision,
                after: AfterOutcome::default(),
                route: routed.facts,
                elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
            });
        }
        let routed = route
            .read(prepared.backend.as_deref(), prepared.request.clone())
            .await?;
        let mut decision = routed.decision;
        add_warnings(&mut decision, &prepared.warnings);
        let after = run_after(&self.after, &prepared, &mut decision).await;
        Ok(Decided {
            label: prepared.label,
            decision,
            after,
            route: routed.facts,
            elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
        })
    }
}
