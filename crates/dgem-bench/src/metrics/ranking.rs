//! Ranking metrics for listwise reranking (reference.md §8.6).
//!
//! * nDCG@k (Järvelin & Kekäläinen 2002, exponential gain): DCG = Σ_{i<k}
//!   (2^{rel_i} − 1)/log2(i + 2) over the predicted order (stable sort by score,
//!   descending); IDCG over the grades sorted descending; IDCG = 0 → 1.
//! * MRR@k: 1/rank of the first passage with grade ≥ 2, 0 if none in the top k.
//! * p-MRR (FollowIR, Weller et al. 2024): 1/rank_orig − 1/rank_changed of the
//!   passage the changed instruction should demote; positive = demoted.
//! * Exact tie rate: (n − #distinct scores rounded to 6 decimals)/n.
//! * Listwise expectation score r̂ = Σ_g g·p_g (p floored at 1e-6 and
//!   renormalized) + 1e-4·ln(p_top/p_0) as a tie-breaker.

/// Indices sorted by score, highest first; equal scores keep input order.
pub fn order(scores: &[f64]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    idx.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    idx
}

/// 1-based rank of passage `i` in the predicted order (`usize::MAX` if out of range).
pub fn rank_of(scores: &[f64], i: usize) -> usize {
    order(scores)
        .iter()
        .position(|&j| j == i)
        .map_or(usize::MAX, |r| r + 1)
}

fn dcg(grades: impl Iterator<Item = u32>) -> f64 {
    grades
        .enumerate()
        .map(|(i, g)| (2f64.powi(g as i32) - 1.0) / ((i + 2) as f64).log2())
        .sum()
}

/// nDCG@k of `scores` against graded relevance `grades`.
pub fn ndcg_at(scores: &[f64], grades: &[u32], k: usize) -> f64 {
    let got = dcg(order(scores)
        .into_iter()
        .take(k)
        .map(|i| grades.get(i).copied().unwrap_or(0)));
    let mut ideal = grades.to_vec();
    ideal.sort_unstable_by(|a, b| b.cmp(a));
    let best = dcg(ideal.into_iter().take(k));
    if best == 0.0 {
        1.0
    } else {
        got / best
    }
}

/// MRR@k: reciprocal rank of the first passage with grade ≥ 2.
pub fn mrr_at(scores: &[f64], grades: &[u32], k: usize) -> f64 {
    order(scores)
        .into_iter()
        .take(k)
        .position(|i| grades.get(i).copied().unwrap_or(0) >= 2)
        .map_or(0.0, |r| 1.0 / (r + 1) as f64)
}

/// Share of `gold` passages in the top `k`.
pub fn recall_at(scores: &[f64], gold: &[usize], k: usize) -> f64 {
    if gold.is_empty() {
        return 1.0;
    }
    let top: Vec<usize> = order(scores).into_iter().take(k).collect();
    gold.iter().filter(|g| top.contains(g)).count() as f64 / gold.len() as f64
}

/// p-MRR of one passage: 1/rank_orig − 1/rank_changed.
pub fn p_mrr(rank_orig: usize, rank_changed: usize) -> f64 {
    1.0 / rank_orig.max(1) as f64 - 1.0 / rank_changed.max(1) as f64
}

/// Exact tie rate of a score list: (n − distinct)/n, scores rounded to 6 decimals.
pub fn tie_rate(scores: &[f64]) -> f64 {
    if scores.is_empty() {
        return 0.0;
    }
    let mut r: Vec<i64> = scores.iter().map(|s| (s * 1e6).round() as i64).collect();
    r.sort_unstable();
    r.dedup();
    (scores.len() - r.len()) as f64 / scores.len() as f64
}

/// Continuous relevance from a grade distribution `p` over grades 0..G−1.
pub fn expectation_score(p: &[f64]) -> f64 {
    if p.is_empty() {
        return 0.0;
    }
    let floored: Vec<f64> = p.iter().map(|x| x.max(1e-6)).collect();
    let z: f64 = floored.iter().sum();
    let q: Vec<f64> = floored.iter().map(|x| x / z).collect();
    let e: f64 = q.iter().enumerate().map(|(g, x)| g as f64 * x).sum();
    let last = q[q.len() - 1];
    e + 1e-4 * (last / q[0]).ln()
}

/// The most probable grade (ties: the lower grade).
pub fn argmax_grade(p: &[f64]) -> f64 {
    let mut best = 0;
    for (i, x) in p.iter().enumerate() {
        if *x > p[best] {
            best = i;
        }
    }
    best as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ndcg_hand_computed() {
        // Predicted order: passages 1 (grade 1), 0 (grade 3), 2 (grade 0).
        // DCG = 1/log2(2) + 7/log2(3) = 1 + 4.416508…; IDCG = 7 + 1/log2(3) = 7.630930…
        let scores = [0.5, 0.9, 0.1];
        let grades = [3, 1, 0];
        let want = (1.0 + 7.0 / 3f64.log2()) / (7.0 + 1.0 / 3f64.log2());
        assert!((ndcg_at(&scores, &grades, 10) - want).abs() < 1e-12);
        assert!((ndcg_at(&[0.9, 0.5, 0.1], &grades, 10) - 1.0).abs() < 1e-12);
        assert_eq!(ndcg_at(&scores, &[0, 0, 0], 10), 1.0);
        // @1: DCG = 1, IDCG = 7.
        assert!((ndcg_at(&scores, &grades, 1) - 1.0 / 7.0).abs() < 1e-12);
    }

    #[test]
    fn mrr_pmrr_ties() {
        assert_eq!(mrr_at(&[0.9, 0.5, 0.1], &[1, 0, 2], 10), 1.0 / 3.0);
        assert_eq!(mrr_at(&[0.9, 0.5], &[1, 0], 10), 0.0);
        // Demoted from rank 1 to rank 4: 1 − 0.25.
        assert_eq!(p_mrr(1, 4), 0.75);
        assert_eq!(p_mrr(4, 1), -0.75);
        assert_eq!(rank_of(&[0.2, 0.9, 0.2], 2), 3);
        assert_eq!(tie_rate(&[0.1, 0.1, 0.2, 0.3]), 0.25);
        assert_eq!(recall_at(&[0.9, 0.1, 0.5], &[0, 1], 2), 0.5);
    }

    #[test]
    fn expectation_hand_computed() {
        // E = 0·0.1 + 1·0.2 + 2·0.3 + 3·0.4 = 2.0; tie-breaker 1e-4·ln 4.
        let s = expectation_score(&[0.1, 0.2, 0.3, 0.4]);
        assert!((s - (2.0 + 1e-4 * 4f64.ln())).abs() < 1e-12);
        assert_eq!(argmax_grade(&[0.1, 0.5, 0.4]), 1.0);
    }
}
