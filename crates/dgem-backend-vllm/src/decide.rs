//! Orchestration of one decision over vLLM (serving.md §7): stages, `ask_if`
//! skips, chunking into groups, chained prefixes with earlier answers prefilled,
//! parallel groups. The bookkeeping (skips, groups, prefill lines, tops and the
//! diagnostics builder) is the shared [`dgem_core::walk`].

use std::sync::Arc;
use std::time::Instant;

use dgem_backend::walker::{self, GroupCall, GroupReader};
use dgem_backend::{DecideError, DecideRequest, Decision};
use dgem_core::images::{check_images, ImageState};
use dgem_core::order::OrderDebias;
use dgem_core::prompt::{state_text, system_text, SystemTextSpec};
use dgem_core::schema::{AnswerFormat, ChunkPrompt, Question, SamplePolicy, ValidSchema};
use dgem_core::slots::answer_text;
use dgem_core::stages::schedule;
use dgem_core::walk::{GroupReads, ReaderFacts};
use dgem_core::CoreError;

use crate::config::{GROUP_SEED_STRIDE, MAX_PARALLEL};
use crate::group::{GroupPlan, Route, UserState};
use crate::listing::{group_listings, pool_listings, Listing};
use crate::VllmDecider;

impl VllmDecider {
    fn system(&self, schema: &ValidSchema, questions: &[&Question], chunked: bool) -> String {
        system_text(&SystemTextSpec {
            questions,
            instructions: schema.instructions.as_deref(),
            format: schema.format,
            mode: self.mode,
            chunked,
            wording: Some(&self.cfg.wording),
        })
    }

    /// serving.md §7.4 `chunk_groups`' fit: the trial group's answer template,
    /// with the scaffold and the end-of-turn token, within `chunk_rows` (or the
    /// canvas) rows.
    fn group_fits(&self, schema: &ValidSchema, trial: &[&Question]) -> Result<bool, DecideError> {
        let limit = schema.chunk_rows.unwrap_or(self.cfg.canvas_len);
        let labels: Vec<Vec<String>> = trial
            .iter()
            .map(|x| dgem_core::labels::labels_for(x, self.mode))
            .collect();
        let text = answer_text(trial, &labels, &vec![0; trial.len()], schema.format);
        let enc = self
            .tok
            .encode(&text)
            .map_err(|e| DecideError::from(CoreError::from(e)))?;
        // rows = scaffold + template + the end-of-turn token, at most `limit`.
        let rows = self.scaffold.full.len() + enc.len() + 1;
        Ok(rows <= limit)
    }
}

/// The vLLM reader under the shared stage walker: what each group sends
/// (serving.md §7.5's table) from the chained prefix built once per decision
/// and listing ([`Listing`]; one listing, the policy's own, unless option
/// order is debiased).
struct VllmReader<'a> {
    d: &'a VllmDecider,
    state: String,
    /// The state's images, when it holds any (then `state` is its text).
    image: Option<Arc<ImageState>>,
    /// Listing 0 is the policy's own order when debiasing is off.
    listings: Vec<Listing>,
    join: &'static str,
    has_prefix_thought: bool,
}

impl VllmReader<'_> {
    /// The state as a group's prompt carries it; an image state restates
    /// `earlier` answers in its text when there are any.
    fn user(&self, earlier: &[String]) -> UserState {
        match &self.image {
            None => UserState::Text(self.state.clone()),
            Some(image) if earlier.is_empty() => UserState::Image {
                image: image.clone(),
                text: self.state.clone(),
                restated: false,
            },
            Some(image) => UserState::Image {
                image: image.clone(),
                text: format!("{}\n\nAnswers so far:\n{}", self.state, earlier.join("\n")),
                restated: true,
            },
        }
    }

    /// An image state's group (serving.md §7.5, image rows): always the chat
    /// route; earlier answers restated with the full question block, else the
    /// full block when chained or shared, the group's own otherwise.
    fn plan_image(
        &self,
        schema: &ValidSchema,
        listing: &Listing,
        group: Vec<Question>,
        earlier: &[String],
        chained: bool,
    ) -> GroupPlan {
        let d = self.d;
        let conditioned = !earlier.is_empty();
        let sys = if conditioned || chained || schema.chunk_prompt == ChunkPrompt::Shared {
            listing.sys_full.clone()
        } else {
            let refs: Vec<&Question> = group.iter().collect();
            d.system(schema, &refs, false)
        };
        GroupPlan {
            questions: group,
            user: self.user(earlier),
            route: Route::Chat,
            sys,
            head: d.scaffold.full.clone(),
            lead: String::new(),
            think: if conditioned { 0 } else { schema.think },
        }
    }

    fn plan(
        &self,
        schema: &ValidSchema,
        listing: &Listing,
        group: Vec<Question>,
        lines: &[String],
        chained: bool,
    ) -> Result<GroupPlan, DecideError> {
        let d = self.d;
        let user = UserState::Text(self.state.clone());
        if !lines.is_empty() {
            let mut ids = listing.base_ids.clone();
            ids.extend(
                d.tok
                    .encode(&lines.join(self.join))
                    .map_err(|e| DecideError::from(CoreError::from(e)))?,
            );
            return Ok(GroupPlan {
                questions: group,
                user,
                route: Route::Tokens(ids),
                sys: listing.sys_full.clone(),
                head: Vec::new(),
                lead: self.join.to_owned(),
                think: 0,
            });
        }
        if chained {
            let (route, head) = if self.has_prefix_thought {
                (Route::Tokens(listing.base_ids.clone()), Vec::new())
            } else {
                (Route::Chat, d.scaffold.full.clone())
            };
            return Ok(GroupPlan {
                questions: group,
                user,
                route,
                sys: listing.sys_full.clone(),
                head,
                lead: String::new(),
                think: 0,
            });
        }
        let sys = if schema.chunk_prompt == ChunkPrompt::Shared {
            let all: Vec<&Question> = listing.all.iter().collect();
            d.system(schema, &all, true)
        } else {
            let refs: Vec<&Question> = group.iter().collect();
            d.system(schema, &refs, false)
        };
        Ok(GroupPlan {
            questions: group,
            user,
            route: Route::Chat,
            sys,
            head: d.scaffold.full.clone(),
            lead: String::new(),
            think: schema.think,
        })
    }

    /// Read `call`'s group in listing `t` under `schema` (the request's, or
    /// a copy with another samples policy), with `group` (its questions in
    /// that listing) and `lines` (earlier answers as that listing writes them).
    #[allow(clippy::too_many_arguments)]
    async fn read_listing(
        &self,
        req: &DecideRequest,
        schema: &ValidSchema,
        call: &GroupCall<'_>,
        t: usize,
        group: Vec<Question>,
        lines: &[String],
    ) -> Result<GroupReads, DecideError> {
        let listing = self.listings.get(t).ok_or_else(|| {
            DecideError::Unsupported(format!("listing {t} missing — this is a bug"))
        })?;
        let plan = if self.image.is_some() {
            self.plan_image(schema, listing, group, &call.earlier, call.chained)
        } else {
            self.plan(schema, listing, group, lines, call.chained)?
        };
        self.d
            .run_group(schema, plan, req.seed + GROUP_SEED_STRIDE * call.k)
            .await
    }
}

#[async_trait::async_trait]
impl GroupReader for VllmReader<'_> {
    fn fits(&self, schema: &ValidSchema, trial: &[&Question]) -> Result<bool, DecideError> {
        // Listings only reorder options: every listing's template has the
        // same length (one slot per question).
        self.d.group_fits(schema, trial)
    }

    async fn read_group(
        &self,
        req: &DecideRequest,
        call: GroupCall<'_>,
    ) -> Result<GroupReads, DecideError> {
        let debias = self.d.cfg.order_debias;
        if debias == OrderDebias::Off {
            // The original reader's requests, unchanged.
            let group: Vec<Question> = call.questions.iter().map(|q| (*q).clone()).collect();
            return self
                .read_listing(req, &req.schema, &call, 0, group, &call.lines)
                .await;
        }
        let m = group_listings(debias, self.d.mode, &call.questions).min(self.listings.len());
        let format = req.schema.format;
        // An `auto` samples policy would decide per listing whether to read
        // more, so one listing could pool more reads than another and bring
        // back the position prior it cancels: every listing reads the
        // policy's maximum instead (`diagnostics.samples.policy` says `fixed`).
        let schema = match req.schema.samples {
            SamplePolicy::Auto { max, .. } if m > 1 => {
                let mut s = req.schema.clone();
                s.samples = SamplePolicy::Fixed { n: max.max(1) };
                std::borrow::Cow::Owned(s)
            }
            _ => std::borrow::Cow::Borrowed(&req.schema),
        };
        let schema = schema.as_ref();
        let futs = self
            .listings
            .iter()
            .take(m)
            .enumerate()
            .map(|(t, listing)| {
                let group: Vec<Question> =
                    call.questions.iter().map(|q| listing.question(q)).collect();
                let lines = listing.lines(&call.answered, self.d.mode, format);
                let call = &call;
                async move { self.read_listing(req, schema, call, t, group, &lines).await }
            });
        let outs = futures_util::future::try_join_all(futs).await?;
        Ok(pool_listings(
            &call.questions,
            &self.listings,
            outs,
            debias,
            self.d.mode,
        ))
    }

    fn concurrency(&self) -> usize {
        MAX_PARALLEL
    }
}

/// Make one decision (serving.md §7.3).
pub(crate) async fn decide(
    d: &VllmDecider,
    mut req: DecideRequest,
) -> Result<Decision, DecideError> {
    let started = Instant::now();
    check_images(&req.state)?;
    let image = ImageState::split(&req.state).map(Arc::new);
    if image.is_some() {
        // Each separate read would repeat the image: `isolate: "auto"` is undone.
        req.schema = req.schema.clone().without_auto_isolation();
    }
    let schema = &req.schema;
    let state = image
        .as_ref()
        .map_or_else(|| state_text(&req.state), |i| i.text.clone());
    let levels = schedule(schema)?;
    let chained = levels.len() > 1 || schema.sequential;
    let all: Vec<&Question> = schema.questions.iter().collect();
    // One listing per option order read (one, the policy's own, when order
    // debiasing is off): its question block and chained prefix.
    let debias = d.cfg.order_debias;
    let n_listings = group_listings(debias, d.mode, &all);
    // Each listing's question block and chained prefix; the thoughts of a
    // chained decision that thinks are written concurrently, one per listing.
    let has_image = image.is_some();
    let state_ref = &state;
    let build = |t: usize| async move {
        let mut listing = Listing::new(debias, d.mode, &schema.questions, t);
        let refs: Vec<&Question> = listing.all.iter().collect();
        // An image decision that is chained restates earlier answers in a
        // prompt listing every question: its block says a reply may cover only some.
        listing.sys_full = d.system(schema, &refs, has_image && chained);
        let mut thought = None;
        // The chained prefix: a thought, or the chat prompt plus the empty scaffold.
        if chained && !has_image {
            if schema.think > 0 {
                let th = d
                    .think(schema.layout, &listing.sys_full, state_ref, schema.think)
                    .await?;
                listing.base_ids = th.prefix;
                thought = Some(th.diagnostics);
            } else {
                listing.base_ids =
                    d.chat_prompt_ids(schema.layout, &listing.sys_full, state_ref)?;
                listing.base_ids.extend(&d.scaffold.full);
            }
        }
        Ok::<_, DecideError>((listing, thought))
    };
    let built = futures_util::future::try_join_all((0..n_listings).map(build)).await?;
    let mut listings = Vec::with_capacity(built.len());
    let mut prefix_thought = None;
    for (listing, thought) in built {
        prefix_thought = prefix_thought.or(thought);
        listings.push(listing);
    }
    let join = match schema.format {
        AnswerFormat::Lines => "\n",
        AnswerFormat::Indexed => " ",
    };
    let restated = image.is_some();
    let reader = VllmReader {
        d,
        state: state.clone(),
        image,
        listings,
        join,
        has_prefix_thought: prefix_thought.is_some(),
    };
    let (acc, _) = walker::walk(&reader, &req).await?;
    let state_tokens = d
        .tok
        .encode(&state)
        .map_err(|e| DecideError::from(CoreError::from(e)))?
        .len();
    let info = &d.info;
    let facts = ReaderFacts {
        restated,
        prompt_wording: Some(d.cfg.wording.hash()),
        runtime: info.runtime.clone(),
        model: info.model_id.clone(),
        model_sha256: None,
        label_mode: d.mode,
        slot_reading: dgem_core::envelope::SlotReading::Joint,
        constrained: d.cfg.constrained,
        calibration: None,
        chained,
        prefix_thought,
        state_tokens,
    };
    let (answers, mut diagnostics) = acc.finish(schema, facts);
    diagnostics.timing.total_ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(Decision {
        answers,
        diagnostics,
    })
}
