//! Human-readable output: the answer table and the `--stats` block.

use std::fmt::Write as _;

use dgem_core::readout::hesitation_band;
use dgem_engine::Decision;

/// `s` with every control character (newlines, carriage returns, ANSI
/// escapes) shown as a space: Stage-2 text can be steered by the state
/// (prompt injection), and must not forge table lines or recolour the
/// terminal.
fn plain(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// The answer table: one row per asked question, in schema order.
pub fn table(d: &Decision) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<18} | {:<8} | {:<20} | {:>10} | {:<22} | {:>9} | {:<7}",
        "QUESTION", "TYPE", "ANSWER", "CONFIDENCE", "HESITATION", "AGREEMENT", "ORDER"
    );
    let _ = writeln!(out, "{}", "-".repeat(112));
    for (id, a) in &d.answers {
        match a {
            None => {
                let _ = writeln!(
                    out,
                    "{id:<18} | {:<8} | {:<20} | {:>10} | {:<22} | {:>9} | {:<7}",
                    "-", "(skipped)", "-", "-", "-", "-"
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
                // `?` marks a withheld answer, `*` one a Stage-2 model gave;
                // the reasons follow the table.
                let mark = if a.abstained.is_some() {
                    "?"
                } else if a.resolved.is_some() {
                    "*"
                } else {
                    ""
                };
                // A multi answer is its selected options (`-` when none is).
                let names = a.selected_names();
                // Cut to the column; the notes below list the whole set.
                let shown = if names.is_empty() {
                    "-".to_owned()
                } else {
                    let all = names.join(", ");
                    if all.chars().count() > 19 {
                        format!("{}…", all.chars().take(18).collect::<String>())
                    } else {
                        all
                    }
                };
                let answer = format!("{shown}{mark}");
                // `fragile`: the listings read in other option orders chose
                // another answer; `stable`: they agreed; `prior`: one order
                // read, the policy's learned prior divided out; `-`: one
                // order read, nothing corrected.
                let order = match &a.order {
                    Some(o) if o.orders > 1 && o.fragile => "fragile",
                    Some(o) if o.orders > 1 => "stable",
                    Some(o) if o.method == "policy_prior" => "prior",
                    _ => "-",
                };
                let _ = writeln!(
                    out,
                    "{id:<18} | {kind:<8} | {answer:<20} | {:>9.1}% | {hes:<22} | {agree:>9} | {order:<7}",
                    g.confidence * 100.0
                );
            }
        }
    }
    let mut notes = String::new();
    for (id, a) in &d.answers {
        let Some(a) = a else { continue };
        if let Some(m) = &a.multi {
            // Each option's own probability of applying; the table's
            // confidence is the probability of exactly the selected set.
            let per: Vec<String> = a
                .question
                .alternatives
                .iter()
                .zip(m.applies())
                .map(|(alt, p)| format!("{} {:.0}%", plain(&alt.name), p * 100.0))
                .collect();
            let _ = writeln!(
                notes,
                "{id}: selected {}; p(applies) {}; confidence is that of the selected set",
                plain(&a.selected_names().join(", ")),
                per.join(", ")
            );
        }
        if let Some(removed) = a.constrained {
            let _ = writeln!(
                notes,
                "{id}: constrained by the policy's rules ({:.1}% of the joint probability removed)",
                removed * 100.0
            );
        }
        if let Some(r) = &a.resolved {
            let _ = writeln!(
                notes,
                "* {id}: answered by stage 2 ({}, confidence {:.0}%; stage 1 said `{}` at {:.1}%): {}",
                plain(&r.model),
                r.confidence * 100.0,
                a.question
                    .alternatives
                    .get(r.stage1_top)
                    .map_or("", |alt| alt.name.as_str()),
                r.stage1_confidence * 100.0,
                plain(&r.explanation)
            );
        }
        if let Some(reason) = &a.abstained {
            let what = match &a.multi {
                Some(_) => format!("the set `{}`", plain(&a.selected_names().join(", "))),
                None => format!("`{}`", a.answer_name()),
            };
            let _ = writeln!(
                notes,
                "? {id}: abstained ({reason}); {what} is only the most probable answer, not one to act on"
            );
        }
    }
    let fragile: Vec<&str> = d
        .answers
        .iter()
        .filter(|(_, a)| {
            a.as_ref()
                .and_then(|a| a.order.as_ref())
                .is_some_and(|o| o.orders > 1 && o.fragile)
        })
        .map(|(id, _)| id.as_str())
        .collect();
    if !fragile.is_empty() {
        let _ = writeln!(
            notes,
            "order: {} changed answer when the options were listed in another order; the pooled answer above is order-invariant but not one to act on alone",
            fragile.join(", ")
        );
    }
    if !notes.is_empty() {
        let _ = write!(out, "\n{notes}");
    }
    for w in &d.diagnostics.warnings {
        let _ = writeln!(out, "\nwarning: {w}");
    }
    if let Some(note) = &d.diagnostics.note {
        let _ = writeln!(out, "\nnote: {note}");
    }
    out
}

/// One paragraph on what the cascade did.
pub fn cascade(c: &dgem_cascade::CascadeSummary) -> String {
    let mut out = String::new();
    let gate = format!(
        "{} gate {} {:.2}",
        c.mode.as_str(),
        c.threshold_mode.as_str(),
        c.threshold
    );
    if !c.triggered {
        let _ = writeln!(
            out,
            "\ncascade: nothing escalated ({gate}; {} answers under it)",
            c.total_slots
        );
        return out;
    }
    let _ = writeln!(
        out,
        "\ncascade: escalated {} of {} answers to {} in {} ms ({gate})",
        c.escalated_count,
        c.total_slots,
        if c.model.is_empty() {
            "stage 2".to_string()
        } else {
            plain(&c.model)
        },
        c.latency_ms
    );
    if !c.error.is_empty() {
        let _ = writeln!(
            out,
            "cascade error: {}; the stage-1 answers stand",
            plain(&c.error)
        );
    }
    for s in c.slots.values().filter(|s| s.escalated) {
        if let Some(e) = &s.error {
            let _ = writeln!(out, "  {}: {}", s.question_id, plain(e));
        }
    }
    out
}

/// The taxonomy-expansion suggestions, one paragraph per question.
pub fn suggestions(list: &[dgem_cascade::Suggestion]) -> String {
    let mut out = String::new();
    if list.is_empty() {
        let _ = writeln!(
            out,
            "\nsuggested taxonomy expansions: none (no choice answer asked for one)"
        );
        return out;
    }
    let _ = writeln!(out, "\nSUGGESTED TAXONOMY EXPANSIONS:");
    for s in list {
        let _ = writeln!(out, "  • {} ({})", s.question_id, s.trigger_reason);
        let _ = writeln!(
            out,
            "    proposed option: {} — {}",
            plain(&s.suggested_option.name),
            plain(&s.suggested_option.description)
        );
        if let Some(e) = &s.error {
            let _ = writeln!(out, "    (stage 2 failed, placeholder name: {})", plain(e));
        }
        let _ = writeln!(out, "    {}", plain(&s.template_patch_hint));
    }
    out
}

/// The `--stats` block.
pub fn stats(d: &Decision, wall_ms: f64) -> String {
    let g = &d.diagnostics;
    let mut out = String::new();
    let rule = "-".repeat(72);
    let _ = writeln!(out, "\n{rule}\nSTATS");
    let _ = writeln!(out, "  model:        {} ({})", g.model, g.runtime);
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
        calibration_line(g.calibration.as_ref())
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
        g.timing.reads,
        g.samples.max_n(),
        g.samples.policy()
    );
    let _ = writeln!(out, "  questions:");
    for (id, q) in &g.questions {
        let h = q.entropy.first().copied().unwrap_or(0.0);
        let line = match (q.label_mass, q.argmax_is_label) {
            (Some(mass), Some(argmax)) => format!(
                "label_mass {:.2}%, argmax is a label: {argmax}, vocab entropy {h:.2} nats",
                mass * 100.0
            ),
            _ => format!(
                "label entropy {h:.2} nats (label tokens read only; --vocab-diagnostics for label_mass)"
            ),
        };
        let _ = writeln!(out, "    {id}: slot at token {}, {line}", q.pos);
    }
    let _ = writeln!(out, "{rule}");
    out
}

/// The `--stats` line on calibration: contextual calibration's content-free
/// states and the shipped temperatures, or `off`.
fn calibration_line(c: Option<&dgem_core::envelope::CalibrationDiagnostics>) -> String {
    let Some(c) = c.filter(|c| !c.is_off()) else {
        return "off".to_owned();
    };
    let mut parts = Vec::new();
    if let Some(s) = &c.contextual {
        parts.push(format!("on, content-free states {s:?}"));
    }
    if let Some(t) = &c.temperature {
        let show = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
        let by_type: Vec<String> = dgem_core::schema::QuestionKind::SLOT_KINDS
            .iter()
            .map(|k| format!("{} {}", k.as_str(), show(t.of(*k))))
            .collect();
        parts.push(format!(
            "temperature {} (shipped for this model; {})",
            by_type.join(" "),
            c.fitted_on.as_deref().unwrap_or("fit unknown")
        ));
    }
    parts.join("; ")
}
