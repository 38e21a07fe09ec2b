use proptest::prelude::*;

use super::*;
use crate::schema::{SchemaDefaults, ValidSchema};

fn question(kind: &str, names: &[&str]) -> Question {
    let key = if kind == "score" { "levels" } else { "options" };
    let v = serde_json::json!({"questions": [{"id": "q", "type": kind, key: names}]});
    ValidSchema::from_value(&v, &SchemaDefaults::default())
        .expect("valid schema")
        .questions
        .remove(0)
}

/// What a model with a pure multiplicative position prior and a content
/// preference `q` reads when the options are listed as `listed`
/// (`listed[i]` = option at position `i`), mapped back to option order.
fn biased_read(prior: &[f64], q: &[f64], listed: &[usize]) -> Vec<f64> {
    let mut p = vec![0.0; q.len()];
    for (pos, &o) in listed.iter().enumerate() {
        p[o] = prior[pos] * q[o];
    }
    let s: f64 = p.iter().sum();
    p.iter().map(|x| x / s).collect()
}

fn reads_of_all_shifts(prior: &[f64], q: &[f64], base: &[usize]) -> Vec<Vec<f64>> {
    shifts(q.len(), q.len())
        .into_iter()
        .map(|s| biased_read(prior, q, &rotate(base, s)))
        .collect()
}

#[test]
fn pure_position_bias_pools_to_uniform() {
    // The first position gets 80 % of the mass whatever is listed there.
    let prior = [0.8, 0.15, 0.05];
    let q = [1.0, 1.0, 1.0];
    let reads = reads_of_all_shifts(&prior, &q, &[0, 1, 2]);
    assert!(reads.iter().all(|r| r.iter().any(|&x| x > 0.7)));
    let pooled = pool_orders(&reads);
    for p in &pooled {
        assert!((p - 1.0 / 3.0).abs() < 1e-12, "{pooled:?}");
    }
    let s = OrderSensitivity::from_orders(&reads, argmax(&pooled), 1);
    assert!(s.fragile);
    assert_eq!(s.orders, 3);
    assert!((s.spread.expect("three orders") - (0.8 - 0.05)).abs() < 1e-9);
}

#[test]
fn content_signal_survives_debiasing() {
    let prior = [0.7, 0.2, 0.1];
    let q = [0.2, 0.5, 0.3];
    let reads = reads_of_all_shifts(&prior, &q, &[0, 1, 2]);
    // Listed first, option 0 wins the single read despite its low content score.
    assert_eq!(argmax(&reads[0]), 0);
    let pooled = pool_orders(&reads);
    for (p, want) in pooled.iter().zip(q) {
        assert!((p - want).abs() < 1e-12, "{pooled:?}");
    }
}

#[test]
fn canonical_order_sorts_choices_by_name_only() {
    let c = question("choice", &["medium", "High", "low"]);
    assert_eq!(canonical_order(&c), vec![1, 2, 0]);
    let s = question("score", &["calm", "annoyed", "furious"]);
    assert_eq!(canonical_order(&s), vec![0, 1, 2]);
}

#[test]
fn shifts_cover_every_position_up_to_the_cap() {
    assert_eq!(shifts(3, 3), vec![0, 1, 2]);
    assert_eq!(shifts(12, 4), vec![0, 3, 6, 9]);
    assert_eq!(shifts(2, 6), vec![0, 1]);
    assert!(shifts(0, 3).is_empty());
    assert_eq!(rotate(&[4, 5, 6], 1), vec![5, 6, 4]);
}

#[test]
fn orders_follow_the_setting() {
    assert_eq!(OrderDebias::Off.orders(5), 1);
    assert_eq!(OrderDebias::default().orders(2), 2);
    assert_eq!(OrderDebias::default().orders(26), DEFAULT_MAX_ORDERS);
    assert_eq!(
        OrderDebias::parse("4"),
        Ok(OrderDebias::Cyclic { max_orders: 4 })
    );
    assert_eq!(OrderDebias::parse("OFF"), Ok(OrderDebias::Off));
    let err = OrderDebias::parse("sideways").expect_err("refused");
    assert!(
        err.contains("[off, cyclic, prior]") && err.contains("sideways"),
        "{err}"
    );
}

#[test]
fn single_read_is_not_estimated() {
    let s = OrderSensitivity::from_orders(&[vec![0.6, 0.4]], 0, 1);
    assert_eq!(s, OrderSensitivity::single());
}

proptest! {
    /// Whatever order the policy lists its options in, the canonical listing
    /// and its rotations read the same options at the same positions, so the
    /// pooled answer is identical.
    #[test]
    fn pooled_answer_does_not_depend_on_the_policy_order(
        prior in proptest::collection::vec(0.01f64..1.0, 4),
        q in proptest::collection::vec(0.01f64..1.0, 4),
        perm in Just(vec![0usize, 1, 2, 3]).prop_shuffle(),
    ) {
        let names = ["delta", "alpha", "charlie", "bravo"];
        let listed: Vec<&str> = perm.iter().map(|&i| names[i]).collect();
        let a = question("choice", &names);
        let b = question("choice", &listed);
        let content = |question: &Question| -> Vec<f64> {
            question.alternatives.iter().map(|alt| {
                q[names.iter().position(|n| *n == alt.name).unwrap_or(0)]
            }).collect()
        };
        let by_name = |question: &Question, p: Vec<f64>| -> Vec<(String, f64)> {
            let mut v: Vec<(String, f64)> = question.alternatives.iter()
                .map(|alt| alt.name.clone()).zip(p).collect();
            v.sort_by(|x, y| x.0.cmp(&y.0));
            v
        };
        let pa = pool_orders(&reads_of_all_shifts(&prior, &content(&a), &canonical_order(&a)));
        let pb = pool_orders(&reads_of_all_shifts(&prior, &content(&b), &canonical_order(&b)));
        for ((na, xa), (nb, xb)) in by_name(&a, pa).into_iter().zip(by_name(&b, pb)) {
            prop_assert_eq!(na, nb);
            prop_assert!((xa - xb).abs() < 1e-12);
        }
        let sum: f64 = pool_orders(&reads_of_all_shifts(&prior, &q, &[0, 1, 2, 3])).iter().sum();
        prop_assert!((sum - 1.0).abs() < 1e-12);
    }
}

#[test]
fn listing_order_is_the_policys_own_when_off_and_canonical_rotations_when_cyclic() {
    let q = question("choice", &["medium", "high", "low"]);
    let w = LabelMode::Words;
    assert_eq!(listing_order(OrderDebias::Off, &q, w, 0), vec![0, 1, 2]);
    assert_eq!(listing_order(OrderDebias::Off, &q, w, 2), vec![0, 1, 2]);
    let cyc = OrderDebias::default();
    // Canonical: high (1), low (2), medium (0); then its rotations.
    assert_eq!(listing_order(cyc, &q, w, 0), vec![1, 2, 0]);
    assert_eq!(listing_order(cyc, &q, w, 1), vec![2, 0, 1]);
    assert_eq!(listing_order(cyc, &q, w, 2), vec![0, 1, 2]);
    // A listing past the question's own count wraps to its rotations.
    assert_eq!(listing_order(cyc, &q, w, 3), vec![1, 2, 0]);
    let listed_q = listed(&q, &listing_order(cyc, &q, w, 1));
    let names: Vec<&str> = listed_q
        .alternatives
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    assert_eq!(names, ["low", "medium", "high"]);
}

#[test]
fn unlist_maps_a_listed_read_back_to_the_questions_own_order() {
    // Listed low, medium, high = alternatives 2, 0, 1.
    assert_eq!(unlist(&[0.5, 0.3, 0.2], &[2, 0, 1]), vec![0.3, 0.2, 0.5]);
    // Out-of-range entries are dropped, never a panic.
    assert_eq!(unlist(&[0.5, 0.5], &[7, 0]), vec![0.5, 0.0]);
}

/// Regression (hostile run of the vLLM reader): a score labelled by digits
/// was rotated, listing level 2 under the digit `1`.
#[test]
fn a_score_labelled_by_digits_keeps_its_scale_in_every_listing() {
    let s = question("score", &["low", "mid", "high", "top"]);
    let cyc = OrderDebias::default();
    assert_eq!(cyc.orders_for(&s, LabelMode::Letters), 1);
    assert_eq!(cyc.orders_for(&s, LabelMode::Words), 4);
    for t in 0..4 {
        assert_eq!(
            listing_order(cyc, &s, LabelMode::Letters, t),
            vec![0, 1, 2, 3]
        );
    }
    assert_eq!(
        listing_order(cyc, &s, LabelMode::Words, 1),
        vec![1, 2, 3, 0]
    );
    // A choice is rotated under letters as under words.
    let c = question("choice", &["a", "b", "c"]);
    assert_eq!(cyc.orders_for(&c, LabelMode::Letters), 3);
}

/// Regression (hostile run): `orders` counted listings × samples (9 for three
/// listings of three samples); it counts listings.
#[test]
fn order_sensitivity_counts_listings_not_listings_times_samples() {
    let dists = [vec![0.6, 0.4], vec![0.5, 0.5], vec![0.3, 0.7]];
    let nine: Vec<Vec<f64>> = dists.iter().cycle().take(9).cloned().collect();
    let s = OrderSensitivity::from_orders(&nine, 0, 3);
    assert_eq!(s.orders, 3);
    assert!((s.spread.expect("several listings") - 0.3).abs() < 1e-12);
    assert!(s.fragile);
    assert_eq!(OrderSensitivity::from_orders(&dists[..2], 0, 2).orders, 1);
}

/// `biased_read` in listed order (position `i` = the option listed there).
fn biased_listed(prior: &[f64], q: &[f64], listed: &[usize]) -> Vec<f64> {
    let own = biased_read(prior, q, listed);
    listed.iter().map(|&o| own[o]).collect()
}

#[test]
fn position_prior_of_one_state_recovers_the_prior() {
    // One state's reads: its content `rho` as well as the positions.
    let pi = [0.6, 0.25, 0.15];
    let rho = [0.5, 0.3, 0.2];
    let orders: Vec<Vec<usize>> = shifts(3, 3)
        .into_iter()
        .map(|s| rotate(&[0, 1, 2], s))
        .collect();
    let listed: Vec<Vec<f64>> = orders.iter().map(|o| biased_listed(&pi, &rho, o)).collect();
    let got_pi = position_prior(&listed);
    // In option space the same reads pool to the content.
    let own: Vec<Vec<f64>> = listed
        .iter()
        .zip(&orders)
        .map(|(d, o)| unlist(d, o))
        .collect();
    let got_rho = pool_orders(&own);
    for (g, w) in got_pi.iter().zip(pi) {
        assert!((g - w).abs() < 1e-12, "{got_pi:?}");
    }
    for (g, w) in got_rho.iter().zip(rho) {
        assert!((g - w).abs() < 1e-12, "{got_rho:?}");
    }
}

#[test]
fn one_read_with_the_position_prior_divided_matches_the_cyclic_pool() {
    let pi = [0.7, 0.2, 0.1];
    let q = [0.2, 0.5, 0.3];
    // One read in the canonical listing 2, 0, 1.
    let listing = [2, 0, 1];
    let read = biased_listed(&pi, &q, &listing);
    let own = unlist(&divide_prior(&read, &pi), &listing);
    let pooled = pool_orders(&reads_of_all_shifts(&pi, &q, &listing));
    for ((a, b), w) in own.iter().zip(&pooled).zip(q) {
        assert!(
            (a - w).abs() < 1e-12 && (b - w).abs() < 1e-12,
            "{own:?} {pooled:?}"
        );
    }
}

#[test]
fn divide_prior_of_another_length_leaves_the_read() {
    assert_eq!(divide_prior(&[0.3, 0.7], &[1.0]), vec![0.3, 0.7]);
    let flat = divide_prior(&[0.3, 0.7], &[0.3, 0.7]);
    assert!((flat[0] - 0.5).abs() < 1e-12);
}

#[test]
fn prior_reads_once_and_estimates_from_every_listing() {
    let debias = OrderDebias::parse("prior").expect("prior parses");
    assert!(matches!(
        debias,
        OrderDebias::Prior {
            max_orders: DEFAULT_MAX_ORDERS
        }
    ));
    let q = question("choice", &["a", "b", "c", "d"]);
    assert_eq!(debias.orders_for(&q, LabelMode::Words), 4);
    assert_eq!(debias.reads_for(&q, LabelMode::Words), 1);
    let cyclic = OrderDebias::default();
    assert_eq!(cyclic.reads_for(&q, LabelMode::Words), 4);
    // Its listings are the cyclic ones.
    for t in 0..4 {
        assert_eq!(
            listing_order(debias, &q, LabelMode::Words, t),
            listing_order(cyclic, &q, LabelMode::Words, t)
        );
    }
    let err = OrderDebias::parse("sorted").expect_err("refused");
    assert!(
        err.contains("[off, cyclic, prior]") && err.contains("`sorted`"),
        "{err}"
    );
    assert_eq!(OrderSensitivity::prior().method, "policy_prior");
}

/// Regression: pooling summed the renormalising term in the policy's option
/// order, so the same listings read for a policy that lists its options in
/// another order gave `medium` 0.3894261115258126 once and
/// 0.38942611152581263 the other time (the real-model order test of the CLI).
#[test]
fn pooled_and_prior_divided_reads_are_bit_identical_in_any_option_order() {
    let reads = vec![
        vec![
            0.378_413_838_571_319_6,
            0.232_160_049_902_867_9,
            0.389_426_111_525_812_6,
        ],
        vec![0.31, 0.27, 0.42],
        vec![0.450_000_1, 0.149_999_9, 0.4],
    ];
    let prior = vec![0.5, 0.3, 0.2];
    let pooled = pool_orders(&reads);
    let divided = divide_prior(&reads[0], &prior);
    for perm in [
        [0, 1, 2],
        [2, 1, 0],
        [1, 2, 0],
        [0, 2, 1],
        [2, 0, 1],
        [1, 0, 2],
    ] {
        let permuted: Vec<Vec<f64>> = reads
            .iter()
            .map(|r| perm.iter().map(|&i| r[i]).collect())
            .collect();
        let again = pool_orders(&permuted);
        let prior_p: Vec<f64> = perm.iter().map(|&i| prior[i]).collect();
        let divided_again = divide_prior(&permuted[0], &prior_p);
        for (j, &i) in perm.iter().enumerate() {
            assert_eq!(
                again[j].to_bits(),
                pooled[i].to_bits(),
                "pooled, order {perm:?}"
            );
            assert_eq!(
                divided_again[j].to_bits(),
                divided[i].to_bits(),
                "divided, order {perm:?}"
            );
        }
    }
}
