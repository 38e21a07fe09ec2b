use proptest::prelude::*;

use super::*;

#[test]
fn softmax_of_equal_logits_is_uniform() {
    let p = restricted_softmax(&[-3.0, -3.0, -3.0, -3.0]);
    assert!(p.iter().all(|x| (x - 0.25).abs() < 1e-12));
    assert!((entropy(&p) - 4f64.ln()).abs() < 1e-12);
    assert!((normalized_entropy(&p) - 1.0).abs() < 1e-12);
}

#[test]
fn softmax_known_values() {
    let p = restricted_softmax(&[0.0, 2f64.ln()]);
    assert!((p[0] - 1.0 / 3.0).abs() < 1e-12);
    assert!((p[1] - 2.0 / 3.0).abs() < 1e-12);
}

#[test]
fn missing_label_gets_min_minus_five() {
    let top: HashMap<TokenId, f64> = [(7, -0.1), (9, -2.5)].into_iter().collect();
    let r = SlotRead::from_top_logprobs(&top, &[7, 11]);
    // label 11 missing → logprob −7.5; softmax over [−0.1, −7.5]
    let expect = 1.0 / (1.0 + (-7.4f64).exp());
    assert!((r.probs[0] - expect).abs() < 1e-12);
    assert_eq!(r.argmax_is_label, Some(true));
    let mass = (-0.1f64).exp() + (-7.5f64).exp();
    assert!((r.label_mass.expect("top-k reads give a mass") - mass).abs() < 1e-12);
}

#[test]
fn label_logits_read_leaves_vocab_fields_empty_until_added() {
    let r = SlotRead::from_label_logits(&[0.0, 3f64.ln()]);
    assert!((r.probs[0] - 0.25).abs() < 1e-12);
    assert!((r.probs[1] - 0.75).abs() < 1e-12);
    let h = -(0.25f64 * 0.25f64.ln() + 0.75 * 0.75f64.ln());
    assert!((r.entropy - h).abs() < 1e-12, "entropy over the labels");
    assert_eq!((r.label_mass, r.argmax_is_label), (None, None));
    let probs = r.probs.clone();
    let full = r.with_vocab(&[0.1f64.ln(), 0.3f64.ln()], 5.0, false);
    assert_eq!(
        full.probs, probs,
        "the vocabulary reading never moves probs"
    );
    assert!((full.label_mass.expect("added") - 0.4).abs() < 1e-12);
    assert_eq!(full.entropy, 5.0);
    assert_eq!(full.argmax_is_label, Some(false));
}

#[test]
fn aggregate_reports_agreement_and_stderr() {
    let reads = vec![vec![0.9, 0.1], vec![0.7, 0.3], vec![0.2, 0.8]];
    let a = aggregate(&reads);
    assert_eq!(a.top, 0);
    assert!((a.confidence - 0.6).abs() < 1e-12);
    assert!((a.agreement.expect("n>1") - 2.0 / 3.0).abs() < 1e-12);
    // sample variance of [0.9, 0.7, 0.2] around 0.6 = (0.09+0.01+0.16)/2 = 0.13
    assert!((a.stderr.expect("n>1") - (0.13f64 / 3.0).sqrt()).abs() < 1e-12);
    let single = aggregate(&reads[..1]);
    assert_eq!(single.stderr, None);
    assert_eq!(single.agreement, None);
}

#[test]
fn calibration_divides_and_renormalizes() {
    let p = calibrate(&[0.6, 0.4], &[0.8, 0.2]);
    // 0.75 : 2.0 → 0.2727 : 0.7273
    assert!((p[0] - 0.75 / 2.75).abs() < 1e-12);
    assert!((p[1] - 2.0 / 2.75).abs() < 1e-12);
}

#[test]
fn auto_policy_extends_only_above_threshold() {
    let auto = SamplePolicy::Auto {
        max: 4,
        threshold: 0.1,
    };
    assert_eq!(sample_plan(auto), (1, 3));
    assert!(auto_extends(auto, &[0.05, 0.2]));
    assert!(!auto_extends(auto, &[0.05, 0.09]));
    assert!(!auto_extends(
        SamplePolicy::Auto {
            max: 1,
            threshold: 0.1
        },
        &[2.0]
    ));
    assert!(!auto_extends(SamplePolicy::Fixed { n: 4 }, &[2.0]));
    assert_eq!(sample_plan(SamplePolicy::Fixed { n: 4 }), (4, 0));
}

#[test]
fn hesitation_bands() {
    assert_eq!(hesitation_band(0.1), "clear");
    assert_eq!(hesitation_band(0.3), "unsure");
    assert_eq!(hesitation_band(0.9), "very_unsure");
}

proptest! {
    #[test]
    fn softmax_sums_to_one_and_entropy_in_range(logits in prop::collection::vec(-50.0f64..50.0, 2..27)) {
        let p = restricted_softmax(&logits);
        let sum: f64 = p.iter().sum();
        prop_assert!((sum - 1.0).abs() < 1e-9);
        let h = entropy(&p);
        prop_assert!(h >= 0.0 && h <= (p.len() as f64).ln() + 1e-9);
        let hn = normalized_entropy(&p);
        prop_assert!((0.0..=1.0).contains(&hn));
    }

    #[test]
    fn score_expectation_within_levels(logits in prop::collection::vec(-20.0f64..20.0, 2..10)) {
        let p = restricted_softmax(&logits);
        let e = score_expectation(&p);
        prop_assert!(e >= 1.0 - 1e-9 && e <= p.len() as f64 + 1e-9);
    }

    #[test]
    fn aggregate_mean_is_a_distribution(reads in prop::collection::vec(prop::collection::vec(-10.0f64..10.0, 3), 1..6)) {
        let dists: Vec<Vec<f64>> = reads.iter().map(|l| restricted_softmax(l)).collect();
        let a = aggregate(&dists);
        prop_assert!((a.mean.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        prop_assert!(a.confidence >= 1.0 / 3.0 - 1e-9);
        if let Some(ag) = a.agreement { prop_assert!((0.0..=1.0).contains(&ag)); }
    }

    #[test]
    fn calibrated_is_a_distribution(p in prop::collection::vec(0.001f64..1.0, 2..8), q in prop::collection::vec(0.001f64..1.0, 8)) {
        let p = mean_distribution(&[p]);
        let prior = mean_distribution(&[q[..p.len()].to_vec()]);
        let c = calibrate(&p, &prior);
        prop_assert!((c.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    }
}

#[test]
fn log_sum_exp_known_values_and_no_finite_entry() {
    let v = log_sum_exp(&[1f64.ln(), 3f64.ln(), f64::NEG_INFINITY]);
    assert!((v - 4f64.ln()).abs() < 1e-12, "{v}");
    // Stable far from 0: ln(2·e^1000) = 1000 + ln 2.
    assert!((log_sum_exp(&[1000.0, 1000.0]) - (1000.0 + 2f64.ln())).abs() < 1e-9);
    assert_eq!(log_sum_exp(&[]), f64::NEG_INFINITY);
    assert_eq!(log_sum_exp(&[f64::NAN]), f64::NEG_INFINITY);
}
