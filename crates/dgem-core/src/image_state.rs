//! When an image is the state: the rule that lets a request which gives an
//! image, and none of a policy's text state variables, decide.
//!
//! A text policy must not decide on its own placeholder text (a template's
//! `{{ default "No ticket text was provided." .ticket }}`), so a request that
//! gives none of its state variables is refused. A policy that reads images
//! is different: the image *is* what it decides on, and its text variables
//! are optional context. The rule, applied by the decision service on every
//! surface:
//!
//! 1. A policy **reads images** when its rendered schema sets
//!    `requires_image: true`, or when its questions, instructions or state
//!    speak of one: a whole word of [`IMAGE_WORDS`] (any case) in a string of
//!    the schema, or in a key or string of the state.
//! 2. When it reads images and the request gives at least one image, the
//!    image satisfies the state requirement. Text variables left unset (all
//!    of them, or those not given beside others) are **dropped from the
//!    state**, not sent as if they were facts: each unset state variable is
//!    rendered as a numbered marker ([`marker`]), every state entry a marker
//!    reaches is removed ([`drop_marked`]), and `diagnostics.warnings` names
//!    the variables and entries left out. A marker that a template's helper
//!    changed past recognition ([`leftover`]) or that reaches the questions
//!    is refused instead. A marker also takes a template's `{{ if .x }}`
//!    branch, as any given value would.
//! 3. A text-only policy keeps the refusal; a policy that reads images and
//!    was given neither an image nor a state variable is refused naming both.

use serde_json::Value;

/// Words that, as whole words in any case, say a policy reads an image.
/// "scan" and "frame" are left out: text policies speak of security scans,
/// time frames and stack frames.
pub const IMAGE_WORDS: &[&str] = &[
    "image",
    "images",
    "photo",
    "photos",
    "photograph",
    "photographs",
    "picture",
    "pictures",
    "screenshot",
    "screenshots",
];

/// Whether a policy whose rendered schema is `schema` and state is `state`
/// reads images (rule 1 of the module docs).
pub fn reads_images(schema: &Value, state: &Value) -> bool {
    if schema.get("requires_image").and_then(Value::as_bool) == Some(true) {
        return true;
    }
    mentions_image(schema, false) || mentions_image(state, true)
}

/// Whether any string in `value` (and, with `keys`, any object key) holds a
/// word of [`IMAGE_WORDS`].
fn mentions_image(value: &Value, keys: bool) -> bool {
    match value {
        Value::String(s) => has_image_word(s),
        Value::Array(items) => items.iter().any(|v| mentions_image(v, keys)),
        Value::Object(m) => m
            .iter()
            .any(|(k, v)| (keys && has_image_word(k)) || mentions_image(v, keys)),
        _ => false,
    }
}

/// Whether `text` holds a word of [`IMAGE_WORDS`] as a whole word; `_` and
/// `-` separate words, so `scene_image` and `photo-id` count.
fn has_image_word(text: &str) -> bool {
    text.split(|c: char| !c.is_alphanumeric())
        .any(|w| IMAGE_WORDS.iter().any(|i| w.eq_ignore_ascii_case(i)))
}

/// The marker the `index`-th unset variable is rendered as, to find where it
/// lands in the rendered policy. Numbered, not named, so that a variable's
/// name (`scan_output`) never reads as an image word. No template text or
/// request holds it by chance.
pub fn marker(index: usize) -> String {
    format!("\u{27e6}dgem-unset:{index}\u{27e7}")
}

/// The indices below `count` whose [`marker`] `value` holds (compared
/// without regard to case, so a template's `upper`/`lower` does not hide
/// it).
pub fn markers_in(value: &Value, count: usize) -> Vec<usize> {
    let text = value.to_string().to_lowercase();
    (0..count)
        .filter(|i| text.contains(&marker(*i).to_lowercase()))
        .collect()
}

/// Whether `value` holds any of the first `count` markers.
pub fn has_marker(value: &Value, count: usize) -> bool {
    !markers_in(value, count).is_empty()
}

/// Whether `value` (keys included) still holds a piece of a marker, as when
/// a template's helper (`trunc`, `printf "%.5s"`) cut one so that it is no
/// longer whole.
pub fn leftover(value: &Value) -> bool {
    value.to_string().to_lowercase().contains("dgem-unset")
}

/// `state` with every entry that holds one of the first `count` markers
/// removed, and the names of the entries removed (object keys; `state` for
/// a text state that was all placeholder; `state[i]` for a list item).
pub fn drop_marked(state: Value, count: usize) -> (Value, Vec<String>) {
    match state {
        Value::Object(map) => {
            let mut dropped = Vec::new();
            let kept = map
                .into_iter()
                .filter(|(k, v)| {
                    let marked = has_marker(v, count);
                    if marked {
                        dropped.push(k.clone());
                    }
                    !marked
                })
                .collect();
            (Value::Object(kept), dropped)
        }
        Value::Array(items) => {
            let mut dropped = Vec::new();
            let kept = items
                .into_iter()
                .enumerate()
                .filter(|(i, v)| {
                    let marked = has_marker(v, count);
                    if marked {
                        dropped.push(format!("state[{i}]"));
                    }
                    !marked
                })
                .map(|(_, v)| v)
                .collect();
            (Value::Array(kept), dropped)
        }
        other if has_marker(&other, count) => (Value::Null, vec!["state".to_owned()]),
        other => (other, Vec::new()),
    }
}

/// The warning of a decision whose unset text variables `names` were left
/// out of the state (entries `dropped`) because images stand in for it.
pub fn dropped_warning(names: &[String], dropped: &[String]) -> String {
    let list = |v: &[String]| {
        v.iter()
            .map(|s| format!("`{s}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let entries = if dropped.is_empty() {
        String::new()
    } else {
        format!(" (state entries {} left out)", list(dropped))
    };
    format!(
        "state: an image was given and {} was not, so the placeholder text the policy has \
         for it was left out of the state instead of sent as fact{entries}",
        list(names)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_policy_reads_images_by_its_flag_its_words_or_its_state_keys() {
        assert!(reads_images(&json!({"requires_image": true}), &json!({})));
        let q = |text: &str| json!({"questions": [{"id": "a", "type": "boolean", "instructions": text}]});
        assert!(reads_images(
            &q("Is the parcel in the PHOTO damaged?"),
            &json!({})
        ));
        assert!(reads_images(
            &q("Does the screenshot show an error?"),
            &json!({})
        ));
        assert!(reads_images(&json!({}), &json!({"scene_image_notes": "x"})));
        assert!(!reads_images(
            &q("Is this ticket urgent?"),
            &json!({"ticket": "the photon count is off"})
        ));
        // Keys of the schema are structure, not its words.
        assert!(!reads_images(
            &json!({"image_detail": "auto"}),
            &json!("text")
        ));
    }

    #[test]
    fn marked_entries_are_dropped_and_named() {
        let m = marker(0);
        let state = json!({"scene": m, "site": "Dock 4", "notes": {"deep": m.to_uppercase()}});
        let (kept, dropped) = drop_marked(state, 1);
        assert_eq!(kept, json!({"site": "Dock 4"}));
        assert_eq!(dropped, ["scene", "notes"]);
        let (kept, dropped) = drop_marked(json!(format!("Scene: {m}")), 1);
        assert_eq!(kept, Value::Null);
        assert_eq!(dropped, ["state"]);
        let (kept, dropped) = drop_marked(json!("a fact"), 1);
        assert_eq!((kept, dropped.len()), (json!("a fact"), 0));
        // Marker 1 is not marker 10.
        assert_eq!(markers_in(&json!(marker(10)), 2), Vec::<usize>::new());
        assert!(leftover(&json!({"x": "\u{27e6}dgem-unset"})));
        let names = vec!["scene_description".to_owned()];
        let w = dropped_warning(&names, &["scene".to_owned()]);
        assert!(
            w.contains("`scene_description`") && w.contains("`scene`"),
            "{w}"
        );
    }

    #[test]
    fn a_variable_named_like_an_image_does_not_make_a_text_policy_read_images() {
        // Markers are numbered: a state key `scan_output` is not an image word
        // either, now that "scan" is not one.
        let state = json!({"scan_output": marker(0)});
        assert!(!reads_images(&json!({"questions": []}), &state));
    }
}
