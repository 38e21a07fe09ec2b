//! [`ByKind`]: one value per question type, for the settings that differ by
//! type (a post-hoc temperature, a calibration's held-out figures). It is
//! indexed by [`QuestionKind`] and sized by [`QuestionKind::SLOT_KINDS`] (a
//! `multi` question shares the `boolean` value: its options are read as yes/no
//! slots), and its JSON
//! form is an object keyed by each type's canonical name (`boolean`,
//! `choice`, `score`), so a new question type needs no new field anywhere a
//! `ByKind` is used.

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::QuestionKind;

/// One value per question type, in [`QuestionKind::SLOT_KINDS`]'s order.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ByKind<T>([T; QuestionKind::SLOT_KINDS.len()]);

/// The position of `kind` in [`QuestionKind::SLOT_KINDS`].
fn index(kind: QuestionKind) -> usize {
    QuestionKind::SLOT_KINDS
        .iter()
        .position(|k| *k == kind.slot_kind())
        .unwrap_or_default()
}

impl<T> ByKind<T> {
    /// The value `f` gives for each type.
    pub fn from_fn(f: impl FnMut(QuestionKind) -> T) -> Self {
        Self(QuestionKind::SLOT_KINDS.map(f))
    }

    /// The value for `kind`.
    pub fn get(&self, kind: QuestionKind) -> &T {
        &self.0[index(kind)]
    }

    /// The value for `kind`, to change.
    pub fn get_mut(&mut self, kind: QuestionKind) -> &mut T {
        &mut self.0[index(kind)]
    }

    /// Each type with its value, in [`QuestionKind::SLOT_KINDS`]'s order.
    pub fn iter(&self) -> impl Iterator<Item = (QuestionKind, &T)> {
        QuestionKind::SLOT_KINDS.iter().copied().zip(self.0.iter())
    }
}

impl<T: Serialize> Serialize for ByKind<T> {
    /// An object keyed by each type's canonical name, in [`QuestionKind::SLOT_KINDS`]'s order.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (kind, v) in self.iter() {
            map.serialize_entry(kind.as_str(), v)?;
        }
        map.end()
    }
}

impl<'de, T: Deserialize<'de> + Default> Deserialize<'de> for ByKind<T> {
    /// An object keyed by canonical type names; a missing type gets
    /// `T::default()` and other keys are ignored (as a struct with a field
    /// per type read them).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de> + Default> Visitor<'de> for V<T> {
            type Value = ByKind<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let names: Vec<&str> = QuestionKind::SLOT_KINDS
                    .iter()
                    .map(|k| k.as_str())
                    .collect();
                write!(f, "an object keyed by question type ({})", names.join(", "))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                let mut out = ByKind::<T>::from_fn(|_| T::default());
                while let Some(key) = m.next_key::<String>()? {
                    match QuestionKind::SLOT_KINDS.iter().find(|k| k.as_str() == key) {
                        Some(kind) => *out.get_mut(*kind) = m.next_value()?,
                        None => {
                            m.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_is_keyed_by_canonical_type_names_and_missing_types_default() {
        let t = ByKind::from_fn(|k| (k == QuestionKind::Choice).then_some(1.5));
        assert_eq!(
            serde_json::to_value(t).expect("json"),
            json!({"boolean": null, "choice": 1.5, "score": null})
        );
        let back: ByKind<Option<f64>> =
            serde_json::from_value(json!({"score": 2.0, "other": 1})).expect("reads");
        assert_eq!(*back.get(QuestionKind::Score), Some(2.0));
        assert_eq!(*back.get(QuestionKind::Boolean), None);
    }
}
