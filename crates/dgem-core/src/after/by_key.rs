//! The one serde read of a request value that is either one value for every
//! question or an object of values by key (question type, question id):
//! `temperature`, `abstain_below`, `abstain_above`, `expected_answers`.
//!
//! Written as a serde visitor rather than read from a [`Value`] afterwards so
//! that an object's bad value is reported at its own path
//! (`temperature.choice`): `serde_path_to_error` records a map key only while
//! its value is being deserialized. Each message has the request keys' shape,
//! "must be …. Given: …" (the caller's path is put in front of it), with the
//! value given as JSON.

use std::fmt;

use serde::de::value::SeqAccessDeserializer;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

/// What a value read by [`read`] was.
#[derive(Debug, Clone, PartialEq)]
pub enum OneOrByKey<X> {
    /// JSON `null`: nothing set.
    Null,
    /// One value, for every key.
    One(X),
    /// An object: its keys, in the order given, with their values.
    ByKey(Vec<(String, X)>),
}

/// How [`read`] checks a value: a plain value (`one`), an object's key
/// (`key`, before its value is read) and an object's value (`each`). Each
/// returns the message's "must be …. Given: …" on refusal.
pub struct Checks<'a, X> {
    /// A value that is not an object (and not `null`).
    pub one: &'a dyn Fn(&Value) -> Result<X, String>,
    /// An object's key.
    pub key: &'a dyn Fn(&str) -> Result<(), String>,
    /// An object's value.
    pub each: &'a dyn Fn(&Value) -> Result<X, String>,
}

impl<X> fmt::Debug for Checks<'_, X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Checks")
    }
}

/// Read one value or an object of values from `d`, under `checks`.
///
/// # Errors
/// The deserializer's error carrying the refusing check's message, raised
/// where the bad key or value sits.
pub fn read<'de, D: Deserializer<'de>, X>(
    d: D,
    checks: &Checks<'_, X>,
) -> Result<OneOrByKey<X>, D::Error> {
    d.deserialize_any(OneOrMap(checks))
}

struct OneOrMap<'c, 'a, X>(&'c Checks<'a, X>);

impl<X> OneOrMap<'_, '_, X> {
    fn one<E: de::Error>(&self, v: Value) -> Result<OneOrByKey<X>, E> {
        if v.is_null() {
            return Ok(OneOrByKey::Null);
        }
        (self.0.one)(&v).map(OneOrByKey::One).map_err(E::custom)
    }
}

impl<'de, X> Visitor<'de> for OneOrMap<'_, '_, X> {
    type Value = OneOrByKey<X>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a value or an object of values")
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Self::Value, E> {
        self.one(Value::Bool(b))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
        self.one(Value::from(n))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
        self.one(Value::from(n))
    }

    fn visit_f64<E: de::Error>(self, x: f64) -> Result<Self::Value, E> {
        self.one(Value::from(x))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
        self.one(Value::from(s))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(OneOrByKey::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(OneOrByKey::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let v = Value::deserialize(SeqAccessDeserializer::new(seq))?;
        self.one(v)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            (self.0.key)(&key).map_err(de::Error::custom)?;
            let x = map.next_value_seed(Each(self.0.each))?;
            out.push((key, x));
        }
        Ok(OneOrByKey::ByKey(out))
    }
}

/// One object value, checked where it sits.
struct Each<'a, X>(&'a dyn Fn(&Value) -> Result<X, String>);

impl<'de, X> DeserializeSeed<'de> for Each<'_, X> {
    type Value = X;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<X, D::Error> {
        let v = Value::deserialize(d)?;
        (self.0)(&v).map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn number(v: &Value) -> Result<f64, String> {
        v.as_f64()
            .ok_or_else(|| format!("must be a number. Given: {v}"))
    }

    fn short(k: &str) -> Result<(), String> {
        (k.len() < 4)
            .then_some(())
            .ok_or_else(|| format!("keys are short. Given: `{k}`"))
    }

    fn read_at(v: Value) -> Result<OneOrByKey<f64>, (String, String)> {
        let checks = Checks {
            one: &number,
            key: &short,
            each: &number,
        };
        struct Seed<'c>(&'c Checks<'c, f64>);
        impl<'de> DeserializeSeed<'de> for Seed<'_> {
            type Value = OneOrByKey<f64>;
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                read(d, self.0)
            }
        }
        let mut track = serde_path_to_error::Track::new();
        let d = serde_path_to_error::Deserializer::new(&v, &mut track);
        Seed(&checks)
            .deserialize(d)
            .map_err(|e| (track.path().to_string(), e.to_string()))
    }

    #[test]
    fn reads_one_value_an_object_or_null_and_reports_where_a_value_is_bad() {
        assert_eq!(read_at(json!(0.5)), Ok(OneOrByKey::One(0.5)));
        assert_eq!(read_at(json!(null)), Ok(OneOrByKey::Null));
        assert_eq!(
            read_at(json!({"a": 1, "b": 2})),
            Ok(OneOrByKey::ByKey(vec![
                ("a".into(), 1.0),
                ("b".into(), 2.0)
            ]))
        );
        assert_eq!(
            read_at(json!({"a": 1, "b": "x"})),
            Err(("b".into(), "must be a number. Given: \"x\"".into()))
        );
        assert_eq!(
            read_at(json!({"long": 1})),
            Err((".".into(), "keys are short. Given: `long`".into()))
        );
        assert_eq!(
            read_at(json!([1, 2])),
            Err((".".into(), "must be a number. Given: [1,2]".into()))
        );
    }
}
