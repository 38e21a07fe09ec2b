//! Property tests of the metric functions.

use proptest::prelude::*;

use super::*;

fn dist(k: usize) -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(0.001f64..1.0, k).prop_map(|v| {
        let z: f64 = v.iter().sum();
        v.into_iter().map(|x| x / z).collect()
    })
}

proptest! {
    #[test]
    fn ece_in_unit_interval(xs in prop::collection::vec((0.0f64..=1.0, any::<bool>()), 0..60)) {
        let e = ece_10bin(&xs);
        prop_assert!((0.0..=1.0).contains(&e));
        let n: usize = reliability_bins(&xs).iter().map(|b| b.count).sum();
        prop_assert_eq!(n, xs.len());
    }

    #[test]
    fn brier_bounds(p in dist(4), g in 0usize..4) {
        let b = brier(&p, Some(g));
        prop_assert!((0.0..=2.0 + 1e-12).contains(&b));
        prop_assert!(nll(&p, Some(g)) >= 0.0);
    }

    #[test]
    fn auroc_flips_with_labels(xs in prop::collection::vec((0.0f64..=1.0, any::<bool>()), 2..40)) {
        let flipped: Vec<(f64, bool)> = xs.iter().map(|&(s, c)| (s, !c)).collect();
        if let (Some(a), Some(b)) = (auroc(&xs), auroc(&flipped)) {
            prop_assert!((a + b - 1.0).abs() < 1e-9);
            prop_assert!((0.0..=1.0).contains(&a));
        }
    }

    #[test]
    fn ndcg_in_unit_interval(scores in prop::collection::vec(0.0f64..3.0, 10), grades in prop::collection::vec(0u32..4, 10)) {
        let n = ndcg_at(&scores, &grades, 10);
        prop_assert!((0.0..=1.0 + 1e-12).contains(&n));
        // Scoring by the grades themselves is ideal.
        let ideal: Vec<f64> = grades.iter().map(|&g| f64::from(g)).collect();
        prop_assert!((ndcg_at(&ideal, &grades, 10) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn tvd_is_a_metric(p in dist(5), q in dist(5), r in dist(5)) {
        prop_assert!(tvd(&p, &p).abs() < 1e-12);
        prop_assert!((tvd(&p, &q) - tvd(&q, &p)).abs() < 1e-12);
        prop_assert!(tvd(&p, &r) <= tvd(&p, &q) + tvd(&q, &r) + 1e-12);
        prop_assert!(tvd(&p, &q) <= 1.0 + 1e-12);
        prop_assert!(jsd(&[p.clone(), q.clone()]) >= 0.0);
    }

    #[test]
    fn mcnemar_symmetric_and_bounded(b in 0u64..60, c in 0u64..60) {
        let x = mcnemar(b, c);
        prop_assert!((x.p_value - mcnemar(c, b).p_value).abs() < 1e-12);
        prop_assert!(x.p_value > 0.0 && x.p_value <= 1.0);
    }

    #[test]
    fn percentile_monotone(v in prop::collection::vec(0.0f64..1e4, 1..50), p in 0.0f64..1.0, q in 0.0f64..1.0) {
        let (lo, hi) = if p <= q { (p, q) } else { (q, p) };
        prop_assert!(percentile(&v, lo) <= percentile(&v, hi) + 1e-9);
    }
}
