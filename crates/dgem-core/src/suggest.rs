//! "Did you mean" hints for the messages of variable errors: the one measure
//! of nearness they all use. A leaf module (it names nothing else in the
//! crate), so that the error types and the variable checks can both use it.

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
