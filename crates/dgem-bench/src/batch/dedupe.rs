//! The content hash that finds identical rows of a run.
//!
//! Two rows are the same decision when what they ask for is the same JSON
//! value: the same variables (in any key order) or the same chat body. The
//! policy, the read options and the seed are the run's, so they are the same
//! for every row. The hash is sha256 over the value written with its object
//! keys sorted (`serde_json` keeps insertion order, so the sort is done
//! here), in hex.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::input::Item;

/// Hex sha256 of `item`'s content (see the module docs).
pub fn content_hash(item: &Item) -> String {
    let mut h = Sha256::new();
    match item {
        Item::Fields(fields) => {
            h.update(b"fields:");
            write_sorted(&Value::Object(fields.clone()), &mut h);
        }
        Item::Chat(body) => {
            h.update(b"chat:");
            write_sorted(body, &mut h);
        }
    }
    hex::encode(h.finalize())
}

/// Feed `v` to `h` as compact JSON with every object's keys sorted.
fn write_sorted(v: &Value, h: &mut Sha256) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            h.update(b"{");
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    h.update(b",");
                }
                h.update(Value::String(k.clone()).to_string().as_bytes());
                h.update(b":");
                if let Some(inner) = m.get(k) {
                    write_sorted(inner, h);
                }
            }
            h.update(b"}");
        }
        Value::Array(a) => {
            h.update(b"[");
            for (i, inner) in a.iter().enumerate() {
                if i > 0 {
                    h.update(b",");
                }
                write_sorted(inner, h);
            }
            h.update(b"]");
        }
        scalar => h.update(scalar.to_string().as_bytes()),
    }
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
    fn key_order_does_not_change_the_hash_but_content_does() {
        let a = content_hash(&fields(json!({"a": 1, "b": {"x": [1, 2], "y": "z"}})));
        let b = content_hash(&fields(json!({"b": {"y": "z", "x": [1, 2]}, "a": 1})));
        let c = content_hash(&fields(json!({"a": 1, "b": {"x": [2, 1], "y": "z"}})));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.len(), 64);
    }

    #[test]
    fn a_chat_body_and_fields_of_the_same_json_differ() {
        let v = json!({"messages": []});
        assert_ne!(
            content_hash(&fields(v.clone())),
            content_hash(&Item::Chat(v))
        );
    }
}
