//! Reading one group: its reads in every listing, the priors they are
//! divided by, and the group's result (moved from `cloze.rs` unchanged).

use tracing::Instrument as _;

use dgem_core::order::{self, OrderDebias};
use dgem_core::readout::{auto_extends, calibrate, entropy, mean_distribution, sample_plan};
use dgem_core::schema::Question;
use dgem_core::walk::{policy_json, GroupReads};

use super::priors::Learned;
use super::{combine, forward_span, labels_for, short_model, Counters, Ctx, QRead, Scoring};
use crate::DecideError;

impl Ctx<'_> {
    /// Run reads `from..to` of a group, each in [`Self::group_orders`]
    /// listings. Returns per read, per question, the read in original
    /// alternative order: the listings' (calibrated) distributions pooled by
    /// [`dgem_core::order::pool_orders`].
    #[allow(clippy::too_many_arguments)]
    async fn run_reads(
        &self,
        reads: std::ops::Range<u32>,
        group: &[&Question],
        listed: &[&Question],
        state: &str,
        prefill: &str,
        learned: Option<&Learned>,
        counters: &mut Counters,
    ) -> Result<Vec<Vec<QRead>>, DecideError> {
        let mode = self.engine.label_mode();
        // Learning a policy's prior: read every cyclic listing.
        let learning = learned.is_some_and(|l| !l.ready);
        let listings = if learning {
            group
                .iter()
                .map(|q| self.order.orders_for(q, mode))
                .max()
                .unwrap_or(1)
        } else {
            self.group_orders(group)
        };
        let mut plans = Vec::new();
        let mut batch = Vec::new();
        for r in reads {
            for t in 0..listings {
                let qs = self.read_questions(r, t, group)?;
                let prompt = self.prompt(r, t, listed, state, prefill)?;
                let (seqs, ranges) = self.sequences(&prompt, &qs, self.vocab)?;
                let longest = seqs.iter().map(|s| s.tokens.len()).max().unwrap_or(0);
                counters.prompt_tokens = counters.prompt_tokens.max(longest);
                counters.rows += qs.len();
                let offset = batch.len();
                let ranges: Vec<_> = ranges
                    .into_iter()
                    .map(|x| x.start + offset..x.end + offset)
                    .collect();
                batch.extend(seqs);
                plans.push((r, t, qs, ranges));
            }
        }
        let positions: Vec<usize> = batch
            .iter()
            .map(|s| s.slots.first().map_or(0, |q| q.pos))
            .collect();
        let span = forward_span(&self.engine.backend.info().runtime, batch.len());
        let out = self.engine.backend.forward(batch).instrument(span).await?;
        counters.absorb(&out);
        let one_read_prior = learned.filter(|l| l.ready);
        // Learning: per question, its canonical read (listing 0 of read 0).
        let mut canonical: Vec<Option<Vec<f64>>> = vec![None; group.len()];
        let mut result: Vec<Vec<QRead>> = Vec::new();
        for (r, t, qs, ranges) in &plans {
            let priors = if self.calibrate {
                Some(self.priors(*r, *t, listed, prefill, qs, counters).await?)
            } else {
                None
            };
            if *t == 0 {
                result.push(Vec::with_capacity(qs.len()));
            }
            let Some(per_q) = result.last_mut() else {
                return Err(short_model("slot readings"));
            };
            for (qi, (rq, range)) in qs.iter().zip(ranges).enumerate() {
                let outs = out
                    .sequences
                    .get(range.clone())
                    .ok_or_else(|| short_model("slot readings"))?;
                let mut read = combine(rq, outs)?;
                let raw = order::unlist(&read.probs, &rq.perm);
                if let Some(p) = priors.as_ref().and_then(|p| p.get(qi)) {
                    read.probs = calibrate(&read.probs, p);
                }
                if let Some(at) = one_read_prior.and_then(|l| l.by_position(qi)) {
                    // Learned on the canonical listing, the prior holds that
                    // listing's position bias: divided position by position,
                    // so a sample read in a shuffled listing is corrected
                    // where its options were listed (for the canonical
                    // listing, the same as option by option).
                    read.probs = order::divide_prior(&read.probs, &at);
                }
                if learning && *r == 0 && *t == 0 {
                    // By position of the canonical listing: the prior's key
                    // (the prompt with that listing) is the same for every
                    // policy listing these options, in whatever own order.
                    if let Some(c) = canonical.get_mut(qi) {
                        *c = Some(read.probs.clone());
                    }
                }
                read.probs = order::unlist(&read.probs, &rq.perm);
                if *t == 0 {
                    let pos = positions.get(range.start).copied().unwrap_or(0);
                    per_q.push(QRead {
                        orders: vec![read.probs.clone()],
                        raw_orders: vec![raw],
                        read,
                        pos,
                        scoring: rq.slot.scoring,
                    });
                    continue;
                }
                // A question with fewer alternatives than the group's widest
                // is read in fewer listings; its extra listings are not pooled.
                let own = group
                    .get(qi)
                    .map_or(1, |q| self.order.orders_for(q, self.engine.label_mode()));
                if let Some(q) = per_q.get_mut(qi).filter(|_| *t < own) {
                    q.orders.push(read.probs);
                    q.raw_orders.push(raw);
                }
            }
        }
        for per_q in &mut result {
            for q in per_q.iter_mut() {
                q.pool();
            }
        }
        if let Some(l) = learned.filter(|_| learning) {
            self.learn(l, state, &canonical)?;
        }
        Ok(result)
    }

    /// Read one group: first reads, `auto` extension, and the group's result.
    pub(super) async fn read_group(
        &self,
        group: &[&Question],
        listed: &[&Question],
        state: &str,
        prefill: &str,
    ) -> Result<GroupReads, DecideError> {
        let samples = self.schema.samples;
        let (first, extra) = sample_plan(samples);
        let mut counters = Counters::default();
        // Under `prior`, the learned policy priors, looked up once per group
        // so that an `auto` extension reads the way the first reads did.
        let learned = match self.order {
            OrderDebias::Prior { .. } => {
                let qs = self.read_questions(0, 0, group)?;
                Some(self.learned_priors(listed, prefill, &qs)?)
            }
            _ => None,
        };
        let mut reads = self
            .run_reads(
                0..first,
                group,
                listed,
                state,
                prefill,
                learned.as_ref(),
                &mut counters,
            )
            .await?;
        let first_entropy: Vec<(String, f64)> = group
            .iter()
            .zip(reads.first().into_iter().flatten())
            .map(|(q, r)| (q.id.clone(), entropy(&r.read.probs)))
            .collect();
        let ents: Vec<f64> = first_entropy.iter().map(|(_, h)| *h).collect();
        let extended = auto_extends(samples, &ents);
        if extended {
            let more = self
                .run_reads(
                    first..first + extra,
                    group,
                    listed,
                    state,
                    prefill,
                    learned.as_ref(),
                    &mut counters,
                )
                .await?;
            reads.extend(more);
        }
        let prior = matches!(self.order, OrderDebias::Prior { .. });
        let one_read_prior = learned.as_ref().is_some_and(|l| l.ready);
        let mode = self.engine.label_mode();
        Ok(GroupReads {
            questions: group.iter().map(|q| (*q).clone()).collect(),
            labels: group.iter().map(|q| labels_for(q, mode)).collect(),
            pos: (0..group.len())
                .map(|qi| reads.first().and_then(|r| r.get(qi)).map_or(0, |x| x.pos))
                .collect(),
            scoring: (0..group.len())
                .map(|qi| {
                    reads
                        .first()
                        .and_then(|r| r.get(qi))
                        .map_or(Scoring::FirstToken, |x| x.scoring)
                })
                .collect(),
            uncalibrated: (0..group.len())
                .map(|qi| {
                    (self.calibrate || prior).then(|| {
                        mean_distribution(&reads.iter().map(|r| r[qi].raw()).collect::<Vec<_>>())
                    })
                })
                .collect(),
            order_prior: one_read_prior,
            order_reads: (0..group.len())
                .map(|qi| {
                    reads
                        .iter()
                        .filter_map(|r| r.get(qi))
                        .flat_map(|q| q.orders.iter().cloned())
                        .collect()
                })
                .collect(),
            reads: reads
                .into_iter()
                .map(|r| r.into_iter().map(|q| q.read).collect())
                .collect(),
            policy: policy_json(samples, extended, &first_entropy),
            thought: None,
            queue_ms: counters.queue_ms,
            forward_ms: counters.forward_ms,
            calibration_ms: counters.calibration_ms,
            prompt_tokens: counters.prompt_tokens,
            cached_tokens: counters.cached_tokens,
            rows: counters.rows,
        })
    }
}
