//! Every dataset shipped under `data/` maps completely: no row is refused, so
//! the default `bench*` runs and `dgem plan` exit 0 without `--allow-refused`.

use std::path::{Path, PathBuf};

use dgem_bench::dataset::{self, Row};
use dgem_bench::suites::bench::BenchRow;
use dgem_bench::suites::intents::IntentRow;
use dgem_bench::suites::jev::JevRow;
use dgem_bench::suites::permutation::PermutationRow;
use dgem_bench::suites::rerank::RerankRow;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../data")
        .join(name)
}

fn rows<R: Row>(path: &Path) -> usize {
    let d = dataset::load::<R>(path, false).expect("loads");
    assert!(d.refused.is_empty(), "{}: {:?}", path.display(), d.refused);
    d.rows.len()
}

#[test]
fn every_shipped_dataset_maps_without_refusals() {
    assert_eq!(rows::<JevRow>(&data("jevbench_style.jsonl")), 231);
    assert_eq!(rows::<PermutationRow>(&data("permutation_suite.jsonl")), 16);
    assert_eq!(rows::<RerankRow>(&data("rerank_suite.jsonl")), 30);
    assert_eq!(rows::<BenchRow>(&data("eval_dataset.jsonl")), 30);
    assert_eq!(rows::<BenchRow>(&data("multilabel_slice.jsonl")), 30);
    assert_eq!(rows::<IntentRow>(&data("intents/banking77_eval.jsonl")), 30);
    assert_eq!(rows::<IntentRow>(&data("intents/clinc150_eval.jsonl")), 30);
}

/// The quality gate's slice (`scripts/jev-slice`, docs/benchmarks.md "Quality
/// gate"): 60 lines of `jevbench_style.jsonl` copied unchanged, every
/// (tier, type) stratum in it at least once and the rest in proportion
/// (largest remainders of 60 · n / 231).
#[test]
fn the_quality_slice_is_60_unchanged_rows_in_proportion() {
    let read = |name: &str| std::fs::read_to_string(data(name)).expect("reads");
    let full = read("jevbench_style.jsonl");
    let slice = read("jevbench_slice60.jsonl");
    let lines: std::collections::HashSet<&str> = full.lines().collect();
    assert!(slice.lines().all(|l| lines.contains(l)));
    assert_eq!(rows::<JevRow>(&data("jevbench_slice60.jsonl")), 60);
    let d = dataset::load::<JevRow>(&data("jevbench_slice60.jsonl"), true).expect("loads");
    let mut strata = std::collections::BTreeMap::new();
    for (_, r) in &d.rows {
        *strata
            .entry(format!("{}/{}", r.tier, r.question.kind))
            .or_insert(0) += 1;
    }
    let want = [
        ("easy/choice", 8),
        ("easy/noul", 4),
        ("easy/score", 1),
        ("hard/choice", 17),
        ("hard/noul", 8),
        ("hard/score", 3),
        ("standard/choice", 11),
        ("standard/noul", 7),
        ("standard/score", 1),
    ];
    assert_eq!(
        strata.into_iter().collect::<Vec<_>>(),
        want.map(|(k, n)| (k.to_owned(), n))
    );
}

/// The multi-label slice (`scripts/multilabel-slice`): one row per eval row,
/// the same variables, a `multi` question `facts` whose expected set is the
/// eval row's own labels (its choice, plus the yes/no fact when it is yes).
#[test]
fn the_multilabel_slice_is_derived_from_the_eval_rows() {
    let eval = dataset::load::<BenchRow>(&data("eval_dataset.jsonl"), true).expect("loads");
    let ml = dataset::load::<BenchRow>(&data("multilabel_slice.jsonl"), true).expect("loads");
    assert_eq!(eval.rows.len(), ml.rows.len());
    for ((_, e), (_, m)) in eval.rows.iter().zip(&ml.rows) {
        assert_eq!(m.id, format!("ml-{}", e.id));
        assert_eq!(m.variables, e.variables);
        let set: Vec<&str> = m.expected["facts"]
            .as_array()
            .expect("a list")
            .iter()
            .map(|v| v.as_str().expect("a name"))
            .collect();
        let (fact, choice) = match e.domain.as_str() {
            "support" => ("urgent", "team"),
            "code_review" => ("approved", "category"),
            _ => ("data_compromise", "action"),
        };
        let named = e.expected[choice].as_str().expect("a name");
        let named = if named == "support" {
            "general_help"
        } else {
            named
        };
        assert_eq!(set.last(), Some(&named), "{}", m.id);
        assert_eq!(
            set.len(),
            1 + usize::from(e.expected[fact] == "yes"),
            "{}",
            m.id
        );
    }
    let check = std::process::Command::new(data("../scripts/multilabel-slice"))
        .arg("--check")
        .status()
        .expect("runs python3");
    assert!(check.success(), "scripts/multilabel-slice --check");
}
