//! "Did you mean" hints: the one measure of nearness of variable names
//! ([`closest_variable`]) and the one of misspelt keys ([`near_key`]). A leaf
//! module (it names nothing else in the crate), so that the error types, the
//! schema's checks and the surfaces can all use it.

/// The name of `candidates` nearest to `name` for a "did you mean" hint: the
/// one at the smallest edit distance (Levenshtein) among those at most 2 edits
/// away or of which one name is a prefix of the other; `None` when none is
/// that near. The one measure every variable message uses.
pub fn closest_variable<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .filter(|c| *c != name)
        .map(|c| (strsim::levenshtein(name, c), c))
        .filter(|(dist, c)| *dist <= 2 || c.starts_with(name) || name.starts_with(c))
        .min_by_key(|(dist, _)| *dist)
        .map(|(_, c)| c)
}

/// Shortest unknown key, in characters, that can be taken for a
/// misspelling: shorter keys are one edit from too many words.
pub const NEAR_KEY_MIN_CHARS: usize = 4;

/// The key of `known` that the unknown `key` nearly spells, for refusing a
/// misspelt key that would otherwise be ignored in silence: one edit away
/// (a letter added, dropped, changed, or two neighbours swapped: optimal
/// string alignment distance 1), for keys of at least
/// [`NEAR_KEY_MIN_CHARS`] characters. One edit, not a similarity score: a
/// known key with a suffix (`instructions_fr`, `question_id`, `optional`)
/// is another key, not a typo. `None` when `key` is itself known or near
/// none; the first near key in `known`'s order wins. A key longer than
/// every known key by more than one character is near none, and is not
/// compared (a request may send a key of megabytes).
pub fn near_key<'a>(key: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let len = key.chars().count();
    if len < NEAR_KEY_MIN_CHARS {
        return None;
    }
    let known: Vec<&str> = known.into_iter().collect();
    if known.contains(&key) {
        return None;
    }
    known
        .into_iter()
        .find(|n| n.chars().count().abs_diff(len) <= 1 && strsim::osa_distance(key, n) <= 1)
}

/// The first of `keys` that is none of `known` but nearly spells one
/// ([`near_key`]), with the key it nearly spells: the check of a policy's
/// and an ad-hoc question's keys.
pub fn near_miss<'a, 'k>(
    keys: impl IntoIterator<Item = &'a String>,
    known: &[&'k str],
) -> Option<(&'a str, &'k str)> {
    keys.into_iter()
        .find_map(|k| near_key(k, known.iter().copied()).map(|n| (k.as_str(), n)))
}

#[cfg(test)]
mod near_key_tests {
    use super::*;

    const KEYS: [&str; 6] = [
        "threshold",
        "instructions",
        "criteria",
        "options",
        "min",
        "id",
    ];

    #[test]
    fn misspellings_are_near_their_key() {
        for (typo, meant) in [
            ("treshold", "threshold"),
            ("thresold", "threshold"),
            ("instrucions", "instructions"),
            ("critera", "criteria"),
            ("option", "options"),
            ("criteira", "criteria"),
        ] {
            assert_eq!(near_key(typo, KEYS), Some(meant), "{typo}");
        }
    }

    #[test]
    fn known_and_unrelated_keys_are_near_nothing() {
        // Known keys, unrelated ones, and known keys with a suffix.
        for key in [
            "threshold",
            "note",
            "x_meta",
            "description",
            "mix",
            "idx",
            "optional",
            "instructions_fr",
            "criteria_desc",
        ] {
            assert_eq!(near_key(key, KEYS), None, "{key}");
        }
        // A key of megabytes is near nothing (and is not compared).
        assert_eq!(near_key(&"o".repeat(8_000_000), KEYS), None);
    }
}
