//! Reply bodies in the shapes of serving.md §5.1 (chat) and §5.2 (completions),
//! and ready-made [`Script`](crate::Script)s.

use serde_json::{json, Map, Value};

use crate::validate::Checked;
use crate::FakeConfig;

fn tok(id: u32) -> String {
    format!("token_id:{id}")
}

/// Build the 200 reply of an accepted request.
pub(crate) fn build(cfg: &FakeConfig, path: &str, req: &Checked) -> Value {
    match req {
        Checked::Think { stop, max_tokens } => {
            let mut ids: Vec<u32> = cfg.thought.iter().copied().take(*max_tokens).collect();
            if ids.len() < *max_tokens {
                if let Some(&s) = stop.first() {
                    ids.push(s);
                }
            }
            let tokens: Vec<String> = ids.iter().map(|&i| tok(i)).collect();
            if path == "/v1/chat/completions" {
                let content: Vec<Value> = tokens
                    .iter()
                    .map(
                        |t| json!({"token": t, "logprob": -0.1, "bytes": null, "top_logprobs": []}),
                    )
                    .collect();
                return json!({"object": "chat.completion", "choices": [{"index": 0,
                    "message": {"role": "assistant", "content": ""},
                    "logprobs": {"content": content}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": ids.len()}});
            }
            json!({"object": "text_completion", "choices": [{"index": 0, "text": "",
                "logprobs": {"tokens": tokens, "token_logprobs": vec![-0.1; ids.len()],
                             "top_logprobs": null, "text_offset": vec![0; ids.len()]},
                "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": ids.len()}})
        }
        Checked::Read(view) => {
            let rows = (cfg.script)(view);
            let width = view.canvas.len();
            let row = |pos: usize| -> Vec<(u32, f64)> {
                let mut r = rows.get(pos).cloned().unwrap_or_default();
                r.sort_by(|a, b| b.1.total_cmp(&a.1));
                r
            };
            let usage = json!({"prompt_tokens": view.prompt.len(), "completion_tokens": width,
                               "total_tokens": view.prompt.len() + width});
            if path == "/v1/chat/completions" {
                let content: Vec<Value> = (0..width)
                    .map(|pos| {
                        let r = row(pos);
                        let top: Vec<Value> = r
                            .iter()
                            .map(
                                |(id, lp)| json!({"token": tok(*id), "logprob": lp, "bytes": null}),
                            )
                            .collect();
                        let (id, lp) = r.first().copied().unwrap_or((view.canvas[pos], 0.0));
                        json!({"token": tok(id), "logprob": lp, "bytes": null, "top_logprobs": top})
                    })
                    .collect();
                json!({"id": "chatcmpl-fake", "object": "chat.completion", "model": cfg.model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": ""},
                                 "logprobs": {"content": content}, "finish_reason": "length"}],
                    "usage": usage})
            } else {
                let mut tokens = Vec::new();
                let mut tops = Vec::new();
                for pos in 0..width {
                    let r = row(pos);
                    let (id, _) = r.first().copied().unwrap_or((view.canvas[pos], 0.0));
                    tokens.push(tok(id));
                    let m: Map<String, Value> =
                        r.iter().map(|(id, lp)| (tok(*id), json!(lp))).collect();
                    tops.push(Value::Object(m));
                }
                json!({"id": "cmpl-fake", "object": "text_completion", "model": cfg.model,
                    "choices": [{"index": 0, "text": "", "logprobs": {"tokens": tokens,
                        "token_logprobs": vec![0.0; width], "top_logprobs": tops,
                        "text_offset": vec![0; width]}, "finish_reason": "length"}],
                    "usage": usage})
            }
        }
    }
}

/// Ready-made scripts.
pub mod scripts {
    use crate::ReadView;

    /// At every canvas position, logprobs over the requested `logprob_token_ids`
    /// proportional to `weight(pos, canvas_token_at_pos, label_id)` (normalized
    /// over the requested ids, as a constrained read is). A weight ≤ 0 leaves the
    /// id out of the returned set (to exercise the missing-label rule).
    pub fn weights(
        weight: impl Fn(usize, u32, u32) -> f64 + Send + Sync + 'static,
    ) -> impl Fn(&ReadView) -> Vec<Vec<(u32, f64)>> + Send + Sync + 'static {
        move |view: &ReadView| {
            view.canvas
                .iter()
                .enumerate()
                .map(|(pos, &cell)| normalized(view, |id| weight(pos, cell, id)))
                .collect()
        }
    }

    /// At every canvas position the same logprobs, proportional to
    /// `weight(view, label_id)`: a read that looks at its prompt (which option
    /// a letter labels) rather than at the canvas. Normalized and filtered as
    /// [`weights`] is.
    pub fn by_label(
        weight: impl Fn(&ReadView, u32) -> f64 + Send + Sync + 'static,
    ) -> impl Fn(&ReadView) -> Vec<Vec<(u32, f64)>> + Send + Sync + 'static {
        move |view: &ReadView| {
            let row = normalized(view, |id| weight(view, id));
            vec![row; view.canvas.len()]
        }
    }

    /// `(id, ln(w / Σw))` over the requested ids with a positive weight.
    fn normalized(view: &ReadView, weight: impl Fn(u32) -> f64) -> Vec<(u32, f64)> {
        let ws: Vec<(u32, f64)> = view
            .label_ids
            .iter()
            .map(|&id| (id, weight(id)))
            .filter(|(_, w)| *w > 0.0)
            .collect();
        let total: f64 = ws.iter().map(|(_, w)| w).sum();
        ws.into_iter()
            .map(|(id, w)| (id, (w / total).ln()))
            .collect()
    }
}
