//! The decision's `samples` block, one entry per part.
//!
//! A *part* is one group read on one canvas (or one cloze prompt). Clients of
//! the original structured server index this block in two shapes, and both are
//! kept exactly:
//! - a decision of **one part that skipped nothing** writes it flat:
//!   `{"n": 3, "tops": [{qid: [label, p, h]}, …], "policy": {…}}`;
//! - **any other decision** (several parts, or `ask_if` skips, or no part at
//!   all) writes one entry per part, in the order the parts were read:
//!   `{"n": [3, 1], "tops": [[…], […]], "policy": [{…}, {…}]}`.
//!
//! In `tops`, each read of a part is `{qid: [label, max probability in [0,1],
//! entropy in nats]}`.

use indexmap::IndexMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{json, Value};

/// One read's `{qid: (label, max probability, entropy in nats)}`.
pub type ReadTops = IndexMap<String, (String, f64, f64)>;

/// The samples of one part.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PartSamples {
    /// Reads averaged in this part.
    pub n: u32,
    /// One entry per read of this part.
    pub tops: Vec<ReadTops>,
    /// The part's samples policy (`{"mode":"fixed",…}` or `{"mode":"auto",…}`).
    pub policy: Value,
}

/// The `samples` block of a decision (see the module docs for its two shapes).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SamplesDiagnostics {
    /// One entry per part, in the order the parts were read.
    pub parts: Vec<PartSamples>,
    /// Write the flat one-part shape: true when the decision read exactly one
    /// part and skipped no question. Ignored when `parts.len() != 1`.
    pub flat: bool,
}

impl SamplesDiagnostics {
    /// The most reads any part averaged (0 with no part).
    pub fn max_n(&self) -> u32 {
        self.parts.iter().map(|p| p.n).max().unwrap_or(0)
    }

    /// The `policy` value as written: the one part's policy in the flat shape,
    /// else the list of every part's.
    pub fn policy(&self) -> Value {
        match self.parts.as_slice() {
            [one] if self.is_flat() => one.policy.clone(),
            parts => Value::Array(parts.iter().map(|p| p.policy.clone()).collect()),
        }
    }

    fn is_flat(&self) -> bool {
        self.flat && self.parts.len() == 1
    }
}

impl Serialize for SamplesDiagnostics {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = match self.parts.as_slice() {
            [one] if self.is_flat() => json!({"n": one.n, "tops": one.tops, "policy": one.policy}),
            parts => json!({
                "n": parts.iter().map(|p| p.n).collect::<Vec<_>>(),
                "tops": parts.iter().map(|p| &p.tops).collect::<Vec<_>>(),
                "policy": parts.iter().map(|p| &p.policy).collect::<Vec<_>>(),
            }),
        };
        v.serialize(s)
    }
}

/// The two wire shapes, for reading an envelope back (a remote dgem server's).
#[derive(Deserialize)]
#[serde(untagged)]
enum Wire {
    Flat {
        n: u32,
        #[serde(default)]
        tops: Vec<ReadTops>,
        #[serde(default)]
        policy: Value,
    },
    Parts {
        #[serde(default)]
        n: Vec<u32>,
        #[serde(default)]
        tops: Vec<Vec<ReadTops>>,
        #[serde(default)]
        policy: Vec<Value>,
    },
}

impl<'de> Deserialize<'de> for SamplesDiagnostics {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match Wire::deserialize(d)? {
            Wire::Flat { n, tops, policy } => Self {
                parts: vec![PartSamples { n, tops, policy }],
                flat: true,
            },
            Wire::Parts { n, tops, policy } => {
                let len = n.len().max(tops.len()).max(policy.len());
                let parts = (0..len)
                    .map(|i| PartSamples {
                        n: n.get(i).copied().unwrap_or(0),
                        tops: tops.get(i).cloned().unwrap_or_default(),
                        policy: policy.get(i).cloned().unwrap_or(Value::Null),
                    })
                    .collect();
                Self { parts, flat: false }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(n: u32, label: &str) -> PartSamples {
        let mut t = ReadTops::new();
        t.insert("q".into(), (label.into(), 0.75, 0.5));
        PartSamples {
            n,
            tops: vec![t; n as usize],
            policy: json!({"mode": "fixed", "n": n, "extended": null, "first_read_entropy": null}),
        }
    }

    #[test]
    fn one_part_without_skips_is_flat_and_round_trips() {
        let s = SamplesDiagnostics {
            parts: vec![part(2, "yes")],
            flat: true,
        };
        let v = serde_json::to_value(&s).unwrap_or_default();
        assert_eq!(v["n"], 2);
        assert_eq!(v["tops"][1]["q"], json!(["yes", 0.75, 0.5]));
        assert_eq!(v["policy"]["mode"], "fixed");
        let back: SamplesDiagnostics = serde_json::from_value(v).unwrap_or_default();
        assert_eq!(back, s);
    }

    #[test]
    fn several_parts_or_a_skip_are_lists_per_part_and_round_trip() {
        let s = SamplesDiagnostics {
            parts: vec![part(2, "yes"), part(1, "A")],
            flat: false,
        };
        let v = serde_json::to_value(&s).unwrap_or_default();
        assert_eq!(v["n"], json!([2, 1]));
        assert_eq!(v["tops"][1][0]["q"], json!(["A", 0.75, 0.5]));
        assert_eq!(v["policy"].as_array().map(Vec::len), Some(2));
        let back: SamplesDiagnostics = serde_json::from_value(v).unwrap_or_default();
        assert_eq!(back, s);
        // One part with a skip is a list of one.
        let skipped = SamplesDiagnostics {
            parts: vec![part(3, "no")],
            flat: false,
        };
        let v = serde_json::to_value(&skipped).unwrap_or_default();
        assert_eq!(v["n"], json!([3]));
        assert_eq!(s.max_n(), 2);
        // No part at all: empty lists.
        let none = serde_json::to_value(SamplesDiagnostics::default()).unwrap_or_default();
        assert_eq!(none, json!({"n": [], "tops": [], "policy": []}));
    }
}
