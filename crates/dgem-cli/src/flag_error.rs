//! A flag value clap refuses, in the words every request-key error uses:
//! "`--samples` must be a count from 1 to 32 or `auto`. Given: 0", the
//! message `/api/decide` and MCP give for the same key, rather than clap's
//! "invalid value '0' for '--samples <N|auto>'". Only the rendering is
//! ours: the parse and its message are the flag's value parser, which is
//! the key's own parse ([`dgem_core::words::flag`],
//! [`dgem_core::schema::request_samples::from_flag`]).

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// dgem's message for a flag value clap refused, `None` for any other clap
/// error (printed as clap writes it).
pub fn message(e: &clap::Error) -> Option<String> {
    if e.kind() != ErrorKind::ValueValidation {
        return None;
    }
    let flag = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(a)) if a.starts_with("--") => {
            a.split([' ', '=', '[']).next()?.to_string()
        }
        _ => return None,
    };
    // Only a value parser's message in the key's shape ("must be ….
    // Given: …", or "keys are …. Given: …" for an object's key); other
    // parsers keep clap's wording.
    let why = std::error::Error::source(e)?.to_string();
    (why.starts_with("must be ") || why.starts_with("keys are ") || why.starts_with("key `"))
        .then(|| format!("`{flag}` {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use dgem_service::{AfterOptions, ReadOptions};

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        read: ReadOptions,
        #[command(flatten)]
        after: AfterOptions,
        #[arg(long)]
        count: Option<u32>,
    }

    fn refused(args: &[&str]) -> Option<String> {
        let mut all = vec!["dgem"];
        all.extend(args);
        message(&Cli::try_parse_from(all).expect_err("refused"))
    }

    /// A bad value inside a flag's JSON object lost its key, and a negative
    /// number was taken for a flag (black-box run: `--temperature -1` gave
    /// clap's "unexpected argument '-1' found").
    #[test]
    fn a_refused_value_in_an_object_or_below_zero_is_named() {
        assert_eq!(
            refused(&["--abstain-above", r#"{"*": 0.5, "team": 2}"#]).as_deref(),
            Some("`--abstain-above` key `team` must be a number from 0 to 1 (abstain when the answer's hesitation, H / ln K, is at or above it). Given: 2")
        );
        let t = refused(&["--temperature", "-1"]).expect("our message");
        assert!(
            t.starts_with("`--temperature` must be") && t.ends_with("Given: -1"),
            "{t}"
        );
        let a = refused(&["--abstain-above", "-0.1"]).expect("our message");
        assert!(
            a.starts_with("`--abstain-above` must be") && a.ends_with("Given: -0.1"),
            "{a}"
        );
    }

    #[test]
    fn a_refused_word_or_count_reads_like_the_request_keys_message() {
        assert_eq!(
            refused(&["--samples", "0"]).as_deref(),
            Some("`--samples` must be a count from 1 to 32 or `auto`. Given: 0")
        );
        assert_eq!(
            refused(&["--layout", "sideways"]).as_deref(),
            Some("`--layout` must be one of [document_first, schema_first]. Given: `sideways`")
        );
        assert_eq!(
            refused(&["--cascade=sometimes"]).as_deref(),
            Some("`--cascade` must be one of [off, entropy, on_miss] (or true/false). Given: `sometimes`")
        );
        // A number-or-JSON flag is read by its key's serde parse, with the
        // key's words, an object's bad key included.
        assert_eq!(
            refused(&["--temperature", "50"]).as_deref(),
            Some("`--temperature` must be a number from 0 to 20 (0 = not set, 1 = no change). Given: 50")
        );
        assert!(
            refused(&["--temperature", r#"{"colour": 2}"#]).is_some_and(|m| m
                .starts_with("`--temperature` keys are question types (")
                && m.ends_with("Given: `colour`"))
        );
        assert_eq!(
            refused(&["--abstain-below", "abc"]).as_deref(),
            Some("`--abstain-below` must be a number from 0 to 1 (abstain when the answer's confidence is below it). Given: \"abc\"")
        );
        assert_eq!(
            refused(&["--cascade-threshold", "inf"]).as_deref(),
            Some("`--cascade-threshold` must be a finite number. Given: `inf`")
        );
        // Regression: a flag whose value is optional is named
        // `--suggest-expansions[=<BOOL>]` by clap; its name ends at the `[`.
        assert_eq!(
            refused(&["--suggest-expansions=yes"]).as_deref(),
            Some("`--suggest-expansions` must be true or false (or one of \"true\", \"1\", \"false\", \"0\"). Given: \"yes\"")
        );
        // Other refusals keep clap's words.
        assert_eq!(refused(&["--count", "x"]), None);
        assert_eq!(refused(&["--nope"]), None);
    }
}
