//! The priors a cloze read divides by: contextual calibration's content-free
//! priors, and the policy priors `--order-debias prior` learns
//! ([`crate::policy_prior`]) (moved from `cloze.rs` unchanged).

use std::time::Instant;

use tracing::Instrument as _;

use dgem_core::readout::mean_distribution;
use dgem_core::schema::Question;
use dgem_core::tokenizer::TokenId;

use super::{combine, forward_span, short_model, Counters, Ctx, PromptText, ReadQuestion};
use crate::calibration::{text_key, PriorKey, CONTENT_FREE_STATES};
use crate::policy_prior;
use crate::DecideError;

impl Ctx<'_> {
    /// Under [`OrderDebias::Prior`], per question of `group` (listing 0 of
    /// read 0 in `qs`): the key of its learned prior ([`crate::policy_prior`])
    /// and the prior itself once it is learned.
    pub(super) fn learned_priors(
        &self,
        listed: &[&Question],
        prefill: &str,
        qs: &[ReadQuestion],
    ) -> Result<Learned, DecideError> {
        // The prompt with the state left out: what the read may depend on
        // besides the state.
        let hole = self.prompt_text(0, 0, listed, "\u{0}state\u{0}").text;
        let mut store = self.engine.policy_priors.lock().map_err(|_| {
            DecideError::Unsupported("policy prior store poisoned — this is a bug".into())
        })?;
        let ids = |ts: &[TokenId]| -> Vec<u8> { ts.iter().flat_map(|t| t.to_le_bytes()).collect() };
        let mut keys = Vec::with_capacity(qs.len());
        let mut priors = Vec::with_capacity(qs.len());
        for rq in qs {
            let labels: Vec<u8> = rq
                .slot
                .labels
                .iter()
                .flat_map(|l| ids(l).into_iter().chain([b'|']))
                .collect();
            let key = policy_prior::prior_key(&[
                hole.as_bytes(),
                prefill.as_bytes(),
                &ids(&rq.slot.cue),
                &labels,
                format!("{:?}", rq.slot.scoring).as_bytes(),
                &[u8::from(self.calibrate), u8::from(self.chained)],
            ]);
            priors.push(store.get(&key).map(|(p, _)| p));
            keys.push(key);
        }
        let ready = priors.iter().all(Option::is_some);
        Ok(Learned {
            keys,
            priors,
            ready,
        })
    }

    /// Priors for each question of one read (content-free states), from cache or model.
    pub(super) async fn priors(
        &self,
        r: u32,
        t: usize,
        listed: &[&Question],
        prefill: &str,
        qs: &[ReadQuestion],
        counters: &mut Counters,
    ) -> Result<Vec<Vec<f64>>, DecideError> {
        // Fast path: every question's priors found by the prompt texts alone.
        let texts: Vec<PromptText> = CONTENT_FREE_STATES
            .iter()
            .map(|cf| self.prompt_text(r, t, listed, cf))
            .collect();
        let plain: Vec<&str> = texts.iter().map(|t| t.text.as_str()).collect();
        let text_keys: Vec<[u8; 32]> = qs
            .iter()
            .map(|q| {
                text_key(
                    &plain,
                    prefill,
                    &q.slot.cue,
                    &q.slot.labels,
                    &format!("{:?}", q.slot.scoring),
                    self.chained,
                )
            })
            .collect();
        {
            let mut cache = self.engine.priors.lock().map_err(|_| {
                DecideError::Unsupported("calibration cache poisoned — this is a bug".into())
            })?;
            let found: Option<Vec<Vec<f64>>> =
                text_keys.iter().map(|k| cache.get_by_text(k)).collect();
            if let Some(found) = found {
                return Ok(found);
            }
        }
        let priors = self.priors_by_tokens(&texts, prefill, qs, counters).await?;
        if let Ok(mut cache) = self.engine.priors.lock() {
            for (k, p) in text_keys.into_iter().zip(&priors) {
                cache.put_by_text(k, p.clone());
            }
        }
        Ok(priors)
    }

    /// [`Self::priors`] through the token-keyed cache (and the store), reading
    /// the content-free prompts (`texts`, one per content-free state) on the
    /// model for what is missing.
    async fn priors_by_tokens(
        &self,
        texts: &[PromptText],
        prefill: &str,
        qs: &[ReadQuestion],
        counters: &mut Counters,
    ) -> Result<Vec<Vec<f64>>, DecideError> {
        let mut per_state = Vec::new();
        for text in texts {
            let prompt = self.tokens_of(text, prefill)?;
            // Priors use the label distribution only.
            per_state.push(self.sequences(&prompt, qs, false)?);
        }
        let key = |qi: usize| -> PriorKey {
            let toks = per_state
                .iter()
                .flat_map(|(seqs, ranges)| {
                    seqs[ranges[qi].clone()]
                        .iter()
                        .flat_map(|s| s.tokens.iter().copied())
                })
                .collect();
            (toks, qs[qi].slot.labels.clone(), self.chained)
        };
        let mut priors: Vec<Option<Vec<f64>>> = {
            let mut cache = self.engine.priors.lock().map_err(|_| {
                DecideError::Unsupported("calibration cache poisoned — this is a bug".into())
            })?;
            (0..qs.len()).map(|qi| cache.get(&key(qi))).collect()
        };
        let missing: Vec<usize> = (0..qs.len()).filter(|&i| priors[i].is_none()).collect();
        if missing.is_empty() {
            return Ok(priors.into_iter().map(Option::unwrap_or_default).collect());
        }
        let started = Instant::now();
        let mut reads = Vec::new();
        // index[state][mi] = range of question missing[mi]'s sequences in `reads`.
        let mut index = Vec::with_capacity(per_state.len());
        for (seqs, ranges) in &per_state {
            let mut at = Vec::with_capacity(missing.len());
            for &qi in &missing {
                let from = reads.len();
                reads.extend(seqs[ranges[qi].clone()].iter().cloned());
                at.push(from..reads.len());
            }
            index.push(at);
        }
        let span = forward_span(&self.engine.backend.info().runtime, reads.len());
        let out = self.engine.backend.forward(reads).instrument(span).await?;
        counters.absorb(&out);
        counters.calibration_ms += started.elapsed().as_secs_f64() * 1e3;
        for (mi, &qi) in missing.iter().enumerate() {
            let mut dists = Vec::with_capacity(index.len());
            for at in &index {
                let outs = out
                    .sequences
                    .get(at[mi].clone())
                    .ok_or_else(|| short_model("calibration readings"))?;
                dists.push(combine(&qs[qi], outs)?.probs);
            }
            let prior = mean_distribution(&dists);
            if let Ok(mut cache) = self.engine.priors.lock() {
                cache.put(key(qi), prior.clone());
            }
            priors[qi] = Some(prior);
        }
        if let Ok(cache) = self.engine.priors.lock() {
            cache.save();
        }
        Ok(priors.into_iter().map(Option::unwrap_or_default).collect())
    }

    /// Add this decision's canonical reads (by position of the canonical
    /// listing) to the
    /// learning of each question still learning its prior
    /// ([`crate::policy_prior`]).
    pub(super) fn learn(
        &self,
        learned: &Learned,
        state: &str,
        canonical: &[Option<Vec<f64>>],
    ) -> Result<(), DecideError> {
        let mut store = self.engine.policy_priors.lock().map_err(|_| {
            DecideError::Unsupported("policy prior store poisoned — this is a bug".into())
        })?;
        let digest = policy_prior::state_digest(state);
        let mut added = false;
        for (key, read) in learned.keys.iter().zip(canonical) {
            if let Some(read) = read {
                added |= store.add(key, digest.clone(), read);
            }
        }
        if added {
            store.save();
        }
        Ok(())
    }
}

/// The learned priors of one group's questions ([`Ctx::learned_priors`]).
pub(super) struct Learned {
    /// Per question, the key of its prior.
    pub(super) keys: Vec<String>,
    /// Per question, its learned prior by position of its canonical listing
    /// (`p[i]` = the prior of the option listed at position `i`), once
    /// learned.
    pub(super) priors: Vec<Option<Vec<f64>>>,
    /// Every question has one: read once.
    pub(super) ready: bool,
}

impl Learned {
    /// Question `qi`'s prior by position of its canonical listing
    /// (`at[i]` = the prior of the option listed at position `i`), once
    /// learned.
    pub(super) fn by_position(&self, qi: usize) -> Option<Vec<f64>> {
        self.priors.get(qi)?.clone()
    }
}
