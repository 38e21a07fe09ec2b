//! Scheduling questions into stages from `depends_on` / `ask_if`
//! (serving.md §7.2, reference.md §1.5).
//!
//! Topological levels: each round takes, in declaration order, every pending
//! question whose dependencies are all done or not in the asked set. A round
//! that takes nothing means a cycle. Each stage is one joint read; a schema
//! without dependencies is a single stage.
//!
//! ```
//! use dgem_core::schema::{SchemaDefaults, ValidSchema};
//! use dgem_core::stages::schedule;
//! let raw = serde_json::json!({"questions": [
//!     {"id": "b", "type": "noul", "depends_on": ["a"]},
//!     {"id": "a", "type": "noul"},
//!     {"id": "c", "type": "noul"}]});
//! let schema = ValidSchema::from_value(&raw, &SchemaDefaults::default())?;
//! assert_eq!(schedule(&schema)?, vec![vec!["a", "c"], vec!["b"]]);
//! # Ok::<(), dgem_core::SchemaError>(())
//! ```

use crate::error::SchemaError;
use crate::schema::ValidSchema;

/// Stages of the asked questions (`ask`, or all), each a list of ids in
/// declaration order. A dependency outside the asked set counts as done.
pub fn schedule(schema: &ValidSchema) -> Result<Vec<Vec<String>>, SchemaError> {
    let pairs: Vec<(&str, &[String])> = schema
        .asked()
        .into_iter()
        .map(|q| (q.id.as_str(), q.depends_on.as_slice()))
        .collect();
    stage_levels(&pairs)
}

/// Topological levels over `(id, dependencies)` pairs in declaration order.
///
/// Dependencies that name no pair count as done. Used by [`schedule`] and by
/// schema validation's cycle check (rule 7), which passes every question.
pub fn stage_levels(questions: &[(&str, &[String])]) -> Result<Vec<Vec<String>>, SchemaError> {
    let in_set = |id: &str| questions.iter().any(|(q, _)| *q == id);
    let mut done: Vec<&str> = Vec::with_capacity(questions.len());
    let mut pending: Vec<&(&str, &[String])> = questions.iter().collect();
    let mut levels = Vec::new();
    while !pending.is_empty() {
        type Entry<'a, 'b> = &'a (&'b str, &'b [String]);
        let (ready, waiting): (Vec<Entry>, Vec<Entry>) = pending
            .into_iter()
            .partition(|q| q.1.iter().all(|d| done.contains(&d.as_str()) || !in_set(d)));
        if ready.is_empty() {
            let ids: Vec<&str> = waiting.iter().map(|(id, _)| *id).collect();
            return Err(SchemaError::new(
                "questions",
                format!("schema: dependency cycle among {}", ids.join(", ")),
            ));
        }
        done.extend(ready.iter().map(|(id, _)| *id));
        levels.push(ready.iter().map(|(id, _)| id.to_string()).collect());
        pending = waiting;
    }
    Ok(levels)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{json, Value};

    use super::*;
    use crate::schema::SchemaDefaults;

    fn valid(v: Value) -> ValidSchema {
        ValidSchema::from_value(&v, &SchemaDefaults::default()).expect("valid schema")
    }

    fn pairs<'a>(qs: &'a [(&'a str, Vec<String>)]) -> Vec<(&'a str, &'a [String])> {
        qs.iter().map(|(id, d)| (*id, d.as_slice())).collect()
    }

    #[test]
    fn flat_schema_is_one_stage() {
        let s =
            valid(json!({"questions": [{"id": "a", "type": "noul"}, {"id": "b", "type": "noul"}]}));
        assert_eq!(schedule(&s).expect("ok"), vec![vec!["a", "b"]]);
    }

    #[test]
    fn chains_and_ask_if() {
        let s = valid(json!({"questions": [
            {"id": "breach", "type": "noul"},
            {"id": "action", "type": "choice", "options": ["x", "y"], "ask_if": {"breach": ["yes"]}},
            {"id": "score", "type": "score", "levels": ["1", "2"]},
            {"id": "note", "type": "noul", "depends_on": ["action", "score"]}
        ]}));
        assert_eq!(
            schedule(&s).expect("ok"),
            vec![vec!["breach", "score"], vec!["action"], vec!["note"]]
        );
    }

    #[test]
    fn unasked_dependencies_count_as_done() {
        let qs = [("b", vec!["a".to_string()]), ("c", vec!["b".to_string()])];
        assert_eq!(
            stage_levels(&pairs(&qs)).expect("ok"),
            vec![vec!["b"], vec!["c"]]
        );
        let s = valid(json!({"questions": [
            {"id": "a", "type": "noul"}, {"id": "b", "type": "noul", "depends_on": ["a"]},
            {"id": "c", "type": "noul"}], "ask": ["c"]}));
        assert_eq!(schedule(&s).expect("ok"), vec![vec!["c"]]);
    }

    #[test]
    fn cycle_names_every_stuck_question() {
        let qs = [
            ("a", vec!["c".to_string()]),
            ("free", vec![]),
            ("b", vec!["a".to_string()]),
            ("c", vec!["b".to_string()]),
        ];
        let err = stage_levels(&pairs(&qs)).expect_err("must fail");
        assert_eq!(err.message, "schema: dependency cycle among a, b, c");
        assert_eq!(err.field, "questions");
    }

    proptest! {
        /// Random DAGs (edges only to lower indices, declared in shuffled order):
        /// every question is scheduled once, every dependency in an earlier
        /// stage, and each stage keeps declaration order.
        #[test]
        fn dependencies_come_first(
            edges in proptest::collection::vec(proptest::collection::vec(any::<prop::sample::Index>(), 0..3), 1..12),
            order in any::<u64>(),
        ) {
            let n = edges.len();
            let mut qs: Vec<(String, Vec<String>)> = (0..n)
                .map(|i| {
                    let deps = if i == 0 { vec![] } else {
                        edges[i].iter().map(|ix| format!("q{}", ix.index(i))).collect()
                    };
                    (format!("q{i}"), deps)
                })
                .collect();
            // Deterministic shuffle of the declaration order.
            let mut seed = order;
            for i in (1..qs.len()).rev() {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                qs.swap(i, (seed >> 33) as usize % (i + 1));
            }
            let p: Vec<(&str, &[String])> = qs.iter().map(|(id, d)| (id.as_str(), d.as_slice())).collect();
            let levels = stage_levels(&p).expect("a DAG schedules");
            let stage_of = |id: &str| levels.iter().position(|l| l.iter().any(|x| x == id));
            prop_assert_eq!(levels.iter().map(Vec::len).sum::<usize>(), n);
            for (id, deps) in &qs {
                let s = stage_of(id).expect("scheduled");
                for d in deps {
                    prop_assert!(stage_of(d).expect("scheduled") < s);
                }
            }
            for level in &levels {
                let pos: Vec<usize> = level.iter().filter_map(|id| qs.iter().position(|(q, _)| q == id)).collect();
                prop_assert!(pos.windows(2).all(|w| w[0] < w[1]));
            }
        }
    }
}
