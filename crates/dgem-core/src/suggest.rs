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

/// Jaro-Winkler similarity at or above which an unknown key is taken for a
/// misspelling of a known one (`thresold`, `instrucions`, `critera`).
pub const NEAR_KEY_SIMILARITY: f64 = 0.9;

/// Shortest unknown key, in characters, that one edit away from a known key
/// (a letter added, dropped, changed or two swapped: `treshold`) counts as
/// its misspelling even below [`NEAR_KEY_SIMILARITY`]; shorter keys are one
/// edit from too many words.
pub const NEAR_KEY_MIN_CHARS: usize = 5;

/// The key of `known` that the unknown `key` nearly spells, for refusing a
/// misspelt key that would otherwise be ignored in silence: Jaro-Winkler
/// similarity at least [`NEAR_KEY_SIMILARITY`], or (for keys of at least
/// [`NEAR_KEY_MIN_CHARS`] characters) one edit away by optimal string
/// alignment. The most similar wins; `None` when `key` is itself known or
/// near none.
pub fn near_key<'a>(key: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let known: Vec<&str> = known.into_iter().collect();
    if known.contains(&key) {
        return None;
    }
    let one_edit = key.chars().count() >= NEAR_KEY_MIN_CHARS;
    known
        .into_iter()
        .map(|n| (strsim::jaro_winkler(key, n), n))
        .filter(|(sim, n)| {
            *sim >= NEAR_KEY_SIMILARITY || (one_edit && strsim::osa_distance(key, n) <= 1)
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, n)| n)
}

#[cfg(test)]
mod near_key_tests {
    use super::*;

    const KEYS: [&str; 5] = ["threshold", "instructions", "criteria", "options", "min"];

    #[test]
    fn misspellings_are_near_their_key() {
        for (typo, meant) in [
            ("treshold", "threshold"),
            ("thresold", "threshold"),
            ("instrucions", "instructions"),
            ("critera", "criteria"),
            ("option", "options"),
        ] {
            assert_eq!(near_key(typo, KEYS), Some(meant), "{typo}");
        }
    }

    #[test]
    fn known_and_unrelated_keys_are_near_nothing() {
        for key in ["threshold", "note", "x_meta", "description", "mix", "id"] {
            assert_eq!(near_key(key, KEYS), None, "{key}");
        }
    }
}
