//! The post-read pipeline every surface runs after Stage 1, in the original
//! client's order: the cascade (on the raw, unscaled answers), then post-hoc
//! temperature and abstention ([`dgem_core::after`]).
//!
//! `decide`, `/api/decide` (serve and gateway), MCP `decide_policy` and the
//! Studio all read their request keys as [`AfterOptions`] (each value by its
//! type's one parse), make an [`AfterRequest`] of them with
//! [`AfterRequest::from_options`] and call [`run_after`], so one request
//! means the same on every surface.

use dgem_backend::Decision;
use std::sync::Arc;

use dgem_core::after::calibration::{policy_hash, CalibrationFile};
use dgem_core::after::{self, AfterRead, Temperature};
use dgem_core::schema::ValidSchema;
use serde::Serialize;
use serde_json::{Map, Value};

use async_trait::async_trait;
use dgem_core::SchemaError;

use crate::error::Stage2Error;
use crate::expand::{ExpansionOptions, Suggestion};
use crate::options::{CascadeOptions, ThresholdMode, DEFAULT_THRESHOLD_NORMALIZED};
use crate::provider::{Stage2, Stage2Reply, Stage2Request};
use crate::summary::CascadeSummary;
use crate::AfterOptions;

/// Reason given to an escalated answer whose Stage-2 call gave nothing, when
/// an abstention rule covers it.
pub const CASCADE_FAILED: &str = "cascade failed";

/// What a request asks for after the read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AfterRequest {
    /// The cascade, when `cascade_mode` asks for one.
    pub cascade: Option<CascadeOptions>,
    /// Taxonomy expansion, when `suggest_expansions` asks for it. The caller
    /// injects the catch-all options into the raw policy before the read
    /// ([`inject_if_asked`]) and records what it injected with
    /// [`AfterRequest::for_policy`]; [`AfterSetup::run`] then runs
    /// [`crate::expand::suggest`] ([`run_after`] alone does not).
    pub expansion: Option<ExpansionOptions>,
    /// The request's temperature and abstention rules (over the policy's).
    pub after: AfterRead,
    /// Template id the suggestions' patch hints name.
    pub template: String,
    /// Choice questions whose catch-all option was injected for this request.
    pub injected: Vec<String>,
}

/// The raw policy `schema` as it is read for a request with post-read keys
/// `keys`: with a catch-all option added to each choice question that lacks
/// one when the request sets `suggest_expansions` (see
/// [`crate::expand::inject_catch_all`]); returns it and the question ids it
/// changed.
pub fn inject_if_asked(keys: &AfterOptions, schema: &Value) -> (Value, Vec<String>) {
    match keys.expansion() {
        Some(_) => crate::expand::inject_catch_all(schema),
        None => (schema.clone(), Vec::new()),
    }
}

/// A normalized threshold compares with a hesitation H / ln K, which is in
/// [0, 1]: one above 1 would never escalate, so it is refused rather than
/// taken (it is most likely a threshold in nats given with the wrong mode).
///
/// # Errors
/// [`SchemaError`] on `cascade_threshold`, naming the bound, the default and
/// the value given.
fn check_threshold(keys: &AfterOptions) -> Result<(), SchemaError> {
    let normalized = keys.cascade_threshold_mode == Some(ThresholdMode::Normalized);
    match keys.cascade_threshold {
        Some(t) if normalized && t > 1.0 => {
            let e = crate::error::CascadeError::invalid(
                "cascade_threshold",
                format!(
                    "at most 1 with `cascade_threshold_mode` normalized (a hesitation H / ln K is in [0, 1]; ≤ 0 uses the default {DEFAULT_THRESHOLD_NORMALIZED})"
                ),
                t.to_string(),
            );
            Err(SchemaError::new("cascade_threshold", e.to_string()))
        }
        _ => Ok(()),
    }
}

impl AfterRequest {
    /// What the post-read keys `keys` ask for on the policy `schema`: the
    /// cascade, expansion, temperature and abstention, with what needs the
    /// policy checked against it (the question ids of `expected_answers`,
    /// with or without a cascade, and of `abstain_below` / `abstain_above`).
    ///
    /// # Errors
    /// [`SchemaError`] naming the key, its allowed values and the value
    /// given, e.g. an `expected_answers` or `abstain_above` key that is no
    /// question id.
    pub fn from_options(keys: &AfterOptions, schema: &ValidSchema) -> Result<Self, SchemaError> {
        // Expectations are checked with the cascade off too: one naming no
        // question is a typo, whatever the mode.
        if let Some(expected) = &keys.expected_answers {
            crate::options::check_expected(&expected.0, schema).map_err(|e| {
                let crate::error::CascadeError::Invalid { field, .. } = &e;
                SchemaError::new(field.clone(), e.to_string())
            })?;
        }
        check_threshold(keys)?;
        let cascade = keys.cascade();
        let ids: Vec<&str> = schema.questions.iter().map(|q| q.id.as_str()).collect();
        let after = AfterRead::for_request(
            keys.temperature.as_ref(),
            keys.abstain_below.as_ref(),
            keys.abstain_above.as_ref(),
            &ids,
        )?;
        Ok(Self {
            cascade,
            expansion: keys.expansion(),
            after,
            template: String::new(),
            injected: Vec::new(),
        })
    }

    /// [`AfterRequest::from_options`] of the post-read keys of a request
    /// object (other keys are ignored), read by [`AfterOptions::from_object`].
    ///
    /// # Errors
    /// [`SchemaError`] naming the key, its allowed values and the value given.
    pub fn from_object(
        obj: &Map<String, Value>,
        schema: &ValidSchema,
    ) -> Result<Self, SchemaError> {
        Self::from_options(&AfterOptions::from_object(obj)?, schema)
    }

    /// Name the template (for patch hints) and the questions whose
    /// catch-all [`inject_if_asked`] added.
    #[must_use]
    pub fn for_policy(mut self, template: &str, injected: Vec<String>) -> Self {
        self.template = template.to_string();
        self.injected = injected;
        self
    }

    /// Whether the request asks [`run_after`] for nothing (expansion, which
    /// [`run_after`] does not run, is not counted).
    pub fn is_empty(&self) -> bool {
        self.cascade.is_none() && self.after.is_identity()
    }
}

/// What [`run_after`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AfterOutcome {
    /// The cascade's summary, when one was asked for.
    pub cascade: Option<CascadeSummary>,
    /// Answers withheld by abstention.
    pub abstained: usize,
    /// What became of the deployment's calibration file, when it has one.
    pub calibration: Option<CalibrationUse>,
    /// Taxonomy-expansion suggestions, when the request asked for them.
    pub suggestions: Option<Vec<Suggestion>>,
}

/// Whether a calibration file's temperatures were used for a decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalibrationUse {
    /// Whether they were.
    pub applied: bool,
    /// Why not (the model or the policy differs from the fitted ones); empty when applied.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

impl AfterOutcome {
    /// The Stage-2 model that wrote at least one answer, if any.
    pub fn cascade_model(&self) -> Option<String> {
        let c = self.cascade.as_ref()?;
        (!c.resolved_slots().is_empty()).then(|| c.model.clone())
    }

    /// The keys a decision reply adds: `cascade` (the summary) and
    /// `calibration` (`{applied, reason?}`), each only when there is one.
    pub fn to_json(&self) -> Option<Map<String, Value>> {
        let mut m = Map::new();
        if let Some(c) = &self.cascade {
            m.insert("cascade".into(), c.to_value());
        }
        if let Some(c) = &self.calibration {
            m.insert(
                "calibration".into(),
                serde_json::to_value(c).unwrap_or(Value::Null),
            );
        }
        if let Some(s) = &self.suggestions {
            m.insert(
                "suggested_expansions".into(),
                serde_json::to_value(s).unwrap_or(Value::Null),
            );
        }
        (!m.is_empty()).then_some(m)
    }
}

/// A deployment's post-read setup: its Stage-2 provider and calibration file.
#[derive(Debug, Default, Clone)]
pub struct AfterSetup {
    /// Where escalated answers go; `None` makes a requested cascade report
    /// that no provider is configured.
    pub stage2: Option<Arc<dyn Stage2>>,
    /// Temperatures fitted by `dgem calibrate`, used for the model and
    /// policies they were fitted on.
    pub calibration: Option<CalibrationFile>,
}

impl AfterSetup {
    /// [`run_after`] with this deployment's provider and, when the decision's
    /// model and policy match the calibration file, its temperatures.
    pub async fn run(
        &self,
        decision: &mut Decision,
        schema: &ValidSchema,
        state: &Value,
        images: &[String],
        request: &AfterRequest,
    ) -> AfterOutcome {
        let (calibrated, usage) = match &self.calibration {
            None => (None, None),
            Some(file) => {
                let sha = decision.diagnostics.model_sha256.as_deref();
                match file.temperature_for(sha, &policy_hash(schema)) {
                    Ok(t) => (
                        Some(t),
                        Some(CalibrationUse {
                            applied: true,
                            reason: String::new(),
                        }),
                    ),
                    Err(e) => (
                        None,
                        Some(CalibrationUse {
                            applied: false,
                            reason: e.to_string(),
                        }),
                    ),
                }
            }
        };
        let mut done = run_after(
            decision,
            schema,
            state,
            images,
            request,
            calibrated,
            self.stage2.as_deref(),
        )
        .await;
        done.calibration = usage;
        if let Some(opts) = &request.expansion {
            let mut opts = opts.clone();
            if opts.model.is_empty() {
                opts.model = request
                    .cascade
                    .as_ref()
                    .map(|c| c.model.clone())
                    .unwrap_or_default();
            }
            let found = crate::expand::suggest(
                decision,
                schema,
                state,
                &request.template,
                &request.injected,
                &opts,
                self.stage2.as_deref(),
                crate::options::DEFAULT_DEADLINE,
            )
            .await;
            done.suggestions = Some(found);
        }
        done
    }
}

/// Run the post-read pipeline on `decision` (made from `schema` and `state`,
/// with `images` as data: or http(s) URIs): the cascade when `request` asks
/// for it, then temperature — the request's, else the policy's, else
/// `calibrated` (a `dgem calibrate` file's) — and abstention. An escalated
/// answer Stage 2 did not answer is withheld with [`CASCADE_FAILED`] when an
/// abstention rule covers it. Never fails: cascade errors are in the summary.
pub async fn run_after(
    decision: &mut Decision,
    schema: &ValidSchema,
    state: &Value,
    images: &[String],
    request: &AfterRequest,
    calibrated: Option<Temperature>,
    stage2: Option<&dyn Stage2>,
) -> AfterOutcome {
    let policy = AfterRead {
        temperature: schema
            .after
            .temperature
            .over(calibrated.unwrap_or_default()),
        abstain: schema.after.abstain.clone(),
    };
    let after = request.after.over(&policy);
    let cascade = match &request.cascade {
        None => None,
        Some(opts) => {
            let provider = stage2.unwrap_or(&Unconfigured);
            Some(crate::run::cascade(decision, schema, state, images, opts, provider).await)
        }
    };
    if let Some(summary) = &cascade {
        for id in summary.failed_slots() {
            if after.abstain.rule_for(&id).is_empty() {
                continue;
            }
            if let Some(Some(a)) = decision.answers.get_mut(&id) {
                a.abstained = Some(CASCADE_FAILED.to_string());
            }
        }
    }
    let abstained = after::apply(&mut decision.answers, &after, state);
    record(decision, cascade.as_ref());
    AfterOutcome {
        cascade,
        abstained,
        calibration: None,
        suggestions: None,
    }
}

/// The provider of a deployment that configured none: every call fails with
/// a configuration error, so the summary still shows what would have escalated.
#[derive(Debug)]
struct Unconfigured;

#[async_trait]
impl Stage2 for Unconfigured {
    fn name(&self) -> &str {
        "none"
    }

    async fn resolve(&self, _req: &Stage2Request) -> Result<Stage2Reply, Stage2Error> {
        Err(Stage2Error::Config {
            provider: "none".into(),
            field: "cascade provider".into(),
            allowed:
                "configured (`--cascade-provider openai:URL` or `vertex`, or DGEM_CASCADE_PROVIDER)"
                    .into(),
            got: "nothing".into(),
        })
    }
}

/// Counter of withheld answers, by question type and reason kind
/// (`hesitation`, `confidence`, `cascade_failed`, `low_information`).
pub const ABSTAINED_METRIC: &str = "dgem_abstained_answers_total";
/// Counter of answers sent to Stage 2, by outcome (`resolved`, `failed`).
pub const ESCALATED_METRIC: &str = "dgem_cascade_escalations_total";

/// Count abstentions and escalations on the process's metrics recorder (a
/// no-op where none is installed, as in `dgem decide`).
fn record(decision: &Decision, cascade: Option<&CascadeSummary>) {
    for a in decision.answers.values().flatten() {
        let Some(reason) = &a.abstained else { continue };
        let kind = if reason.starts_with("hesitation") {
            "hesitation"
        } else if reason.starts_with("confidence") {
            "confidence"
        } else if reason == CASCADE_FAILED {
            "cascade_failed"
        } else {
            "low_information"
        };
        metrics::counter!(ABSTAINED_METRIC, "question_type" => a.question.kind.wire_name(), "reason" => kind)
            .increment(1);
    }
    if let Some(c) = cascade {
        let resolved = c.resolved_slots().len() as u64;
        let failed = c.failed_slots().len() as u64;
        metrics::counter!(ESCALATED_METRIC, "outcome" => "resolved").increment(resolved);
        metrics::counter!(ESCALATED_METRIC, "outcome" => "failed").increment(failed);
    }
}
