//! The content hash that finds identical rows of a run.
//!
//! Two rows are the same decision when what they ask for is the same JSON
//! value: the same variables or the same chat body. The policy, the read
//! options and the seed are the run's, so they are the same for every row.
//! The top-level fields of a row may come in any order (a template reads
//! its variables by name); nested objects keep their order, because a state
//! or an object variable is written into the prompt as it comes, and
//! `{"a", "b"}` and `{"b", "a"}` are then different prompts. With ad-hoc
//! questions the row itself is the state, so its key order counts too
//! ([`content_hash`]'s `ordered`). The hash is sha256 over the value so
//! written, in hex.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::input::Item;

/// Hex sha256 of `item`'s content (see the module docs). `ordered`: the
/// row's own key order counts (ad-hoc questions, where the row is the
/// state); else its top-level fields are taken in sorted order.
pub fn content_hash(item: &Item, ordered: bool) -> String {
    let mut h = Sha256::new();
    match item {
        Item::Fields(fields) => {
            h.update(b"fields:");
            let mut keys: Vec<&String> = fields.keys().collect();
            if !ordered {
                keys.sort();
            }
            for k in keys {
                h.update(Value::String(k.clone()).to_string().as_bytes());
                h.update(b":");
                if let Some(v) = fields.get(k) {
                    h.update(v.to_string().as_bytes());
                }
                h.update(b",");
            }
        }
        Item::Chat(body) => {
            h.update(b"chat:");
            h.update(body.to_string().as_bytes());
        }
    }
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn fields(v: Value) -> Item {
        Item::Fields(v.as_object().unwrap().clone())
    }

    #[test]
    fn top_level_order_does_not_change_the_hash_but_nested_order_does() {
        let a = content_hash(
            &fields(json!({"a": 1, "b": {"x": [1, 2], "y": "z"}})),
            false,
        );
        let b = content_hash(
            &fields(json!({"b": {"x": [1, 2], "y": "z"}, "a": 1})),
            false,
        );
        let nested = content_hash(
            &fields(json!({"a": 1, "b": {"y": "z", "x": [1, 2]}})),
            false,
        );
        let c = content_hash(
            &fields(json!({"a": 1, "b": {"x": [2, 1], "y": "z"}})),
            false,
        );
        assert_eq!(a, b);
        assert_ne!(a, nested, "a nested object is written as it comes");
        assert_ne!(a, c);
        assert_eq!(a.len(), 64);
    }

    #[test]
    fn a_row_that_is_the_state_keeps_its_key_order() {
        let a = content_hash(&fields(json!({"a": 1, "b": 2})), true);
        let b = content_hash(&fields(json!({"b": 2, "a": 1})), true);
        assert_ne!(a, b);
    }

    #[test]
    fn a_chat_body_and_fields_of_the_same_json_differ() {
        let v = json!({"messages": []});
        assert_ne!(
            content_hash(&fields(v.clone()), false),
            content_hash(&Item::Chat(v), false)
        );
    }
}
