//! Human-readable output: the answer table and the `--stats` block.

use std::fmt::Write as _;

use dgem_core::readout::hesitation_band;
use dgem_engine::Decision;

/// The answer table: one row per asked question, in schema order.
pub fn table(d: &Decision) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<18} | {:<8} | {:<20} | {:>10} | {:<22} | {:>9}",
        "QUESTION", "TYPE", "ANSWER", "CONFIDENCE", "HESITATION", "AGREEMENT"
    );
    let _ = writeln!(out, "{}", "-".repeat(102));
    for (id, a) in &d.answers {
        match a {
            None => {
                let _ = writeln!(
                    out,
                    "{id:<18} | {:<8} | {:<20} | {:>10} | {:<22} | {:>9}",
                    "-", "(skipped)", "-", "-", "-"
                );
            }
            Some(a) => {
                let kind = a.question.kind.as_str();
                let g = &a.aggregate;
                let hes = format!(
                    "{:.2} ({})",
                    g.normalized_entropy,
                    hesitation_band(g.normalized_entropy).replace('_', " ")
                );
                let agree = g
                    .agreement
                    .map_or_else(|| "-".to_owned(), |x| format!("{x:.2}"));
                let _ = writeln!(
                    out,
                    "{id:<18} | {kind:<8} | {:<20} | {:>9.1}% | {hes:<22} | {agree:>9}",
                    a.answer_name(),
                    g.confidence * 100.0
                );
            }
        }
    }
    if let Some(note) = &d.diagnostics.note {
        let _ = writeln!(out, "\nnote: {note}");
    }
    out
}

/// The `--stats` block.
pub fn stats(d: &Decision, wall_ms: f64) -> String {
    let g = &d.diagnostics;
    let mut out = String::new();
    let rule = "-".repeat(72);
    let _ = writeln!(out, "\n{rule}\nSTATS");
    let _ = writeln!(out, "  model:        {} ({})", g.model, g.engine);
    if let Some(sha) = &g.model_sha256 {
        let _ = writeln!(out, "  model sha256: {sha}");
    }
    let _ = writeln!(
        out,
        "  reading:      {} slots, {} labels, layout {}",
        g.slot_reading.as_str(),
        g.label_mode.as_str(),
        g.layout.as_str()
    );
    let _ = writeln!(
        out,
        "  calibration:  {}",
        g.calibration.as_ref().map_or_else(
            || "off".to_owned(),
            |s| format!("on, content-free states {s:?}")
        )
    );
    let _ = writeln!(out, "  timing:       wall {wall_ms:.0} ms, decision {:.0} ms (queue {:.1} ms, model {:.0} ms, calibration {:.0} ms)",
        g.timing.total_ms, g.timing.queue_ms, g.timing.forward_ms, g.timing.calibration_ms);
    let prompt = g.prompt_tokens.unwrap_or(0);
    let _ = writeln!(
        out,
        "  tokens:       longest read {prompt}, state {}, reused from the KV cache over all reads {}",
        g.state_tokens, g.cached_tokens
    );
    let _ = writeln!(
        out,
        "  reads:        {} (samples n={}, policy {})",
        g.timing.reads, g.samples.n, g.samples.policy
    );
    let _ = writeln!(out, "  questions:");
    for (id, q) in &g.questions {
        let h = q.entropy.first().copied().unwrap_or(0.0);
        let _ = writeln!(
            out,
            "    {id}: slot at token {}, label_mass {:.2}%, argmax is a label: {}, vocab entropy {h:.2} nats",
            q.pos,
            q.label_mass * 100.0,
            q.argmax_is_label
        );
    }
    let _ = writeln!(out, "{rule}");
    out
}
