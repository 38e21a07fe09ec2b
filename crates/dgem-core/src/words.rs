//! Closed sets of values written on the wire as words: `layout`, `isolate`,
//! the cascade's modes.
//!
//! A type lists its values once ([`Word::ALL`]) and names each once
//! ([`Word::name`], with accepted spellings in [`Word::aliases`]). Everything
//! else is derived from that one list, so what is advertised and what is
//! accepted cannot drift apart:
//! - the parse ([`parse`], [`from_value`]) and its error message, which
//!   names the allowed values and the value given;
//! - serde (the [`crate::word_serde`] macro: the name out, [`from_value`]
//!   in);
//! - behind Cargo features of the crate that invokes the macro: the JSON
//!   Schema (`schemars`) and the OpenAPI schema (`utoipa`), each a plain
//!   string `enum` of the names;
//! - behind this crate's `clap` feature, the flag's value parser
//!   (`flag`), which lists the names in `--help`.
//!
//! Hand-written rather than a derive (`strum`, clap's `ValueEnum` derive):
//! one list has to feed five consumers, with aliases that are accepted but
//! never advertised and messages in dgem's own shape.

use serde_json::Value;

use crate::json::shown;

/// A closed set of values whose wire form is a word.
pub trait Word: Copy + Eq + Sized + 'static {
    /// Every value, in the order the schemas and messages list them.
    const ALL: &'static [Self];

    /// The canonical wire name (what is advertised and written back).
    fn name(self) -> &'static str;

    /// Other spellings accepted for this value and never advertised
    /// (compared like the name: trimmed, ASCII case-insensitive).
    fn aliases(self) -> &'static [&'static str] {
        &[]
    }

    /// The value a JSON boolean stands for, when the type takes one (the
    /// cascade's `cascade_mode: true`); `None` refuses booleans.
    fn from_bool(_b: bool) -> Option<Self> {
        None
    }

    /// What the value must be, in words, for a message: `one of [a, b]`.
    fn expected() -> String {
        format!("one of [{}]", names::<Self>().join(", "))
    }
}

/// The advertised names of `T`, in [`Word::ALL`] order.
pub fn names<T: Word>() -> Vec<&'static str> {
    T::ALL.iter().map(|w| w.name()).collect()
}

/// The value named `s` (a name or an alias; trimmed, ASCII
/// case-insensitive), `None` for any other text.
pub fn parse<T: Word>(s: &str) -> Option<T> {
    let s = s.trim();
    T::ALL.iter().copied().find(|w| {
        w.name().eq_ignore_ascii_case(s) || w.aliases().iter().any(|a| a.eq_ignore_ascii_case(s))
    })
}

/// The value whose canonical name is exactly `s` (no trimming, no case
/// folding, no aliases): the policy keys, which the original server read
/// strictly.
pub fn parse_exact<T: Word>(s: &str) -> Option<T> {
    T::ALL.iter().copied().find(|w| w.name() == s)
}

/// `names` quoted and joined the way the original server's schema messages
/// list them: `"a", "b" or "c"`.
pub fn quoted_or(names: &[&str]) -> String {
    joined_or(names, '"')
}

/// `names`, each between two `quote` characters, joined as a sentence
/// lists them: `` `a` ``, `` `a` or `b` ``, `` `a`, `b` or `c` ``; empty
/// for no names.
pub fn joined_or(names: &[&str], quote: char) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("{quote}{n}{quote}")).collect();
    match quoted.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// The value a JSON value names: a string through [`parse`], a boolean
/// through [`Word::from_bool`].
///
/// # Errors
/// The message without the field, e.g. `must be one of [document_first,
/// schema_first]. Given: "sideways"`; the caller puts the field in front.
pub fn from_value<T: Word>(v: &Value) -> Result<T, String> {
    let found = match v {
        Value::String(s) => parse::<T>(s),
        Value::Bool(b) => T::from_bool(*b),
        _ => None,
    };
    found.ok_or_else(|| format!("must be {}. Given: {}", T::expected(), shown(v)))
}

/// The value of a command-line flag: [`parse`] with the text as given.
///
/// # Errors
/// The message without the flag, the value shown in backticks, e.g. `must be
/// one of [auto, noul, none, all]. Given: `some``.
pub fn from_flag<T: Word>(s: &str) -> Result<T, String> {
    parse::<T>(s).ok_or_else(|| format!("must be {}. Given: `{}`", T::expected(), s.trim()))
}

/// The clap value parser of a flag that takes a `T`: [`from_flag`] (so
/// the flag trims, ignores case and takes the aliases, as the request key
/// does), with the names as the possible values `--help` lists. A refusal
/// is clap's value-validation error carrying [`from_flag`]'s message.
#[cfg(feature = "clap")]
pub fn flag<T: Word + Send + Sync>() -> FlagParser<T> {
    FlagParser(std::marker::PhantomData)
}

/// See [`flag`].
#[cfg(feature = "clap")]
#[derive(Debug, Clone, Copy)]
pub struct FlagParser<T>(std::marker::PhantomData<T>);

#[cfg(feature = "clap")]
impl<T: Word + Send + Sync> clap::builder::TypedValueParser for FlagParser<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        let parse: fn(&str) -> Result<T, String> = from_flag::<T>;
        parse.parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            T::ALL
                .iter()
                .map(|w| clap::builder::PossibleValue::new(w.name())),
        ))
    }
}

/// Re-exports for [`crate::word_serde`], so that a crate invoking it needs
/// only the dependencies of the features it turns on.
#[doc(hidden)]
pub mod __private {
    #[cfg(feature = "schemars")]
    pub use schemars;
    pub use serde;
    pub use serde_json;
    #[cfg(feature = "utoipa")]
    pub use utoipa;
}

/// Implement serde (the name out, [`from_value`] in) for a [`Word`] type,
/// and, where the invoking crate turns the feature on (it must turn on
/// `dgem-core`'s feature of the same name), `schemars::JsonSchema` and
/// `utoipa::ToSchema`: a plain string `enum` of
/// [`names`], inlined, for small-schema clients. The second argument is the
/// name the OpenAPI document gives the schema, the third its description
/// there (any expression that gives a `String` or `&str`).
#[macro_export]
macro_rules! word_serde {
    ($t:ty, $schema_name:literal, $description:expr) => {
        impl $crate::words::__private::serde::Serialize for $t {
            fn serialize<S: $crate::words::__private::serde::Serializer>(
                &self,
                s: S,
            ) -> ::core::result::Result<S::Ok, S::Error> {
                s.serialize_str($crate::words::Word::name(*self))
            }
        }

        impl<'de> $crate::words::__private::serde::Deserialize<'de> for $t {
            fn deserialize<D: $crate::words::__private::serde::Deserializer<'de>>(
                d: D,
            ) -> ::core::result::Result<Self, D::Error> {
                let v = <$crate::words::__private::serde_json::Value as $crate::words::__private::serde::Deserialize>::deserialize(d)?;
                $crate::words::from_value::<$t>(&v)
                    .map_err(<D::Error as $crate::words::__private::serde::de::Error>::custom)
            }
        }

        #[cfg(feature = "schemars")]
        impl $crate::words::__private::schemars::JsonSchema for $t {
            fn inline_schema() -> bool {
                true
            }

            fn schema_name() -> ::std::borrow::Cow<'static, str> {
                ::std::borrow::Cow::Borrowed($schema_name)
            }

            fn json_schema(
                _: &mut $crate::words::__private::schemars::SchemaGenerator,
            ) -> $crate::words::__private::schemars::Schema {
                $crate::words::__private::schemars::json_schema!({
                    "type": "string",
                    "enum": $crate::words::names::<$t>(),
                })
            }
        }

        #[cfg(feature = "utoipa")]
        impl $crate::words::__private::utoipa::PartialSchema for $t {
            fn schema() -> $crate::words::__private::utoipa::openapi::RefOr<
                $crate::words::__private::utoipa::openapi::schema::Schema,
            > {
                use $crate::words::__private::utoipa::openapi::schema::{ObjectBuilder, Type};
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some($crate::words::names::<$t>()))
                    .description(Some($description))
                    .into()
            }
        }

        #[cfg(feature = "utoipa")]
        impl $crate::words::__private::utoipa::ToSchema for $t {
            fn name() -> ::std::borrow::Cow<'static, str> {
                ::std::borrow::Cow::Borrowed($schema_name)
            }
        }

    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Switch {
        Off,
        On,
    }

    impl Word for Switch {
        const ALL: &'static [Self] = &[Self::Off, Self::On];
        fn name(self) -> &'static str {
            match self {
                Self::Off => "off",
                Self::On => "on",
            }
        }
        fn aliases(self) -> &'static [&'static str] {
            match self {
                Self::Off => &["false", ""],
                Self::On => &["true"],
            }
        }
        fn from_bool(b: bool) -> Option<Self> {
            Some(if b { Self::On } else { Self::Off })
        }
    }

    crate::word_serde!(Switch, "Switch", "on or off");

    #[test]
    fn names_aliases_case_and_booleans_are_read_and_others_refused_naming_the_names() {
        assert_eq!(names::<Switch>(), ["off", "on"]);
        assert_eq!(parse::<Switch>(" ON "), Some(Switch::On));
        assert_eq!(parse::<Switch>(""), Some(Switch::Off));
        assert_eq!(parse_exact::<Switch>("ON"), None);
        assert_eq!(parse_exact::<Switch>("on"), Some(Switch::On));
        assert_eq!(from_value::<Switch>(&json!(true)), Ok(Switch::On));
        assert_eq!(
            from_value::<Switch>(&json!(["on"])),
            Err("must be one of [off, on]. Given: [\"on\"]".to_string())
        );
        assert_eq!(
            from_flag::<Switch>("maybe"),
            Err("must be one of [off, on]. Given: `maybe`".to_string())
        );
    }

    #[test]
    fn serde_writes_the_name_and_reads_through_the_same_parse() {
        assert_eq!(serde_json::to_value(Switch::On).ok(), Some(json!("on")));
        let back: Switch = serde_json::from_value(json!("TRUE")).expect("alias");
        assert_eq!(back, Switch::On);
        let e = serde_json::from_value::<Switch>(json!(3)).expect_err("refused");
        assert_eq!(e.to_string(), "must be one of [off, on]. Given: 3");
    }

    #[test]
    fn quoted_or_joins_like_the_original_server() {
        assert_eq!(
            quoted_or(&["auto", "noul", "none", "all"]),
            "\"auto\", \"noul\", \"none\" or \"all\""
        );
        assert_eq!(quoted_or(&["a", "b"]), "\"a\" or \"b\"");
        assert_eq!(quoted_or(&["a"]), "\"a\"");
    }
}
