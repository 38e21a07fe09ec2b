//! The shared stage walker with a recording reader: which groups are read, in
//! what order, what each prompt lists and which answer lines each sees.

use std::sync::Mutex;

use async_trait::async_trait;
use dgem_backend::walker::{walk, GroupCall, GroupReader};
use dgem_backend::{DecideError, DecideRequest};
use dgem_core::envelope::Scoring;
use dgem_core::readout::SlotRead;
use dgem_core::schema::{Question, SamplePolicy, SchemaDefaults, ValidSchema};
use dgem_core::walk::{policy_json, GroupReads};
use serde_json::json;

/// One recorded group call: its ids, the ids its prompt lists, its lines, its k.
type Call = (Vec<String>, Vec<String>, Vec<String>, i64);

#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<Call>>,
    concurrency: usize,
}

#[async_trait]
impl GroupReader for Recorder {
    fn fits(&self, _s: &ValidSchema, trial: &[&Question]) -> Result<bool, DecideError> {
        Ok(trial.len() <= 2)
    }

    async fn read_group(
        &self,
        _req: &DecideRequest,
        call: GroupCall<'_>,
    ) -> Result<GroupReads, DecideError> {
        let ids = |qs: &[&Question]| qs.iter().map(|q| q.id.clone()).collect::<Vec<_>>();
        self.calls.lock().expect("lock").push((
            ids(&call.questions),
            ids(&call.listed),
            call.lines.clone(),
            call.k,
        ));
        let n = call.questions.len();
        Ok(GroupReads {
            questions: call.questions.iter().map(|q| (*q).clone()).collect(),
            labels: call
                .questions
                .iter()
                .map(|q| q.alternatives.iter().map(|a| a.name.clone()).collect())
                .collect(),
            reads: vec![call
                .questions
                .iter()
                .map(|q| SlotRead {
                    probs: (0..q.alternatives.len())
                        .map(|i| {
                            if i == 0 {
                                0.9
                            } else {
                                0.1 / (q.alternatives.len() - 1) as f64
                            }
                        })
                        .collect(),
                    label_mass: Some(1.0),
                    entropy: 0.3,
                    argmax_is_label: Some(true),
                })
                .collect()],
            pos: vec![0; n],
            scoring: vec![Scoring::Canvas; n],
            uncalibrated: vec![None; n],
            order_reads: vec![Vec::new(); n],
            order_prior: false,
            policy: policy_json(SamplePolicy::Fixed { n: 1 }, false, &[]),
            thought: None,
            queue_ms: 0.0,
            forward_ms: 1.0,
            calibration_ms: 0.0,
            prompt_tokens: 10,
            cached_tokens: 0,
            rows: n + 1,
        })
    }

    fn concurrency(&self) -> usize {
        self.concurrency.max(1)
    }
}

fn req(v: serde_json::Value) -> DecideRequest {
    DecideRequest {
        schema: ValidSchema::from_value(&v, &SchemaDefaults::default()).expect("valid"),
        state: json!("s"),
        seed: 42,
    }
}

fn policy(sequential: bool) -> serde_json::Value {
    let c = |id: &str| json!({"id": id, "type": "choice", "options": ["x", "y"]});
    json!({"questions": [c("a"), c("b"), c("c"),
        {"id": "d", "type": "choice", "options": ["x", "y"], "depends_on": ["a"]}],
        "sequential": sequential, "isolate": "none"})
}

#[tokio::test]
async fn groups_of_a_stage_see_earlier_stages_only_unless_sequential() {
    for concurrency in [1, 4] {
        let r = Recorder {
            concurrency,
            ..Recorder::default()
        };
        let (w, chained) = walk(&r, &req(policy(false))).await.expect("walk");
        assert!(chained, "two stages");
        let calls = r.calls.lock().expect("lock").clone();
        assert_eq!(calls.len(), 3);
        assert_eq!(calls[0].0, ["a", "b"]);
        assert_eq!(calls[1].0, ["c"]);
        assert!(calls[1].2.is_empty(), "same stage: no lines of group 0");
        assert_eq!(calls[2].0, ["d"]);
        assert_eq!(calls[2].2, ["a: x\nb: x", "c: x"]);
        assert_eq!(calls.iter().map(|c| c.3).collect::<Vec<_>>(), [0, 1, 2]);
        // Chained: every prompt lists every question.
        assert!(calls.iter().all(|c| c.1 == ["a", "b", "c", "d"]));
        assert_eq!(w.lines().len(), 3);
    }
    let r = Recorder::default();
    walk(&r, &req(policy(true))).await.expect("walk");
    let calls = r.calls.lock().expect("lock").clone();
    assert_eq!(
        calls[1].2,
        ["a: x\nb: x"],
        "sequential: group 1 sees group 0"
    );
}

#[tokio::test]
async fn a_flat_schema_lists_each_groups_own_questions() {
    let r = Recorder::default();
    let c = |id: &str| json!({"id": id, "type": "choice", "options": ["x", "y"]});
    let (_, chained) = walk(&r, &req(json!({"questions": [c("a"), c("b"), c("c")]})))
        .await
        .expect("walk");
    assert!(!chained);
    let calls = r.calls.lock().expect("lock").clone();
    assert_eq!(calls[0].1, ["a", "b"]);
    assert_eq!(calls[1].1, ["c"]);
}
