use serde_json::json;

use super::*;

#[derive(Debug, Clone, Deserialize)]
struct R {
    id: String,
    n: u32,
}
impl Row for R {
    fn id(&self) -> &str {
        &self.id
    }
    fn check(&self) -> Result<(), String> {
        if self.n == 0 {
            return Err("`n` must be at least 1. Given: `0`".into());
        }
        Ok(())
    }
}

fn write(text: &str) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(f.path(), text).expect("write");
    f
}

/// Regression: bad lines were skipped with a warning only; each is now a
/// refusal with its line, its id when it has one, and the reason.
#[test]
fn unmappable_rows_are_refused_with_line_id_and_reason() {
    let f = write(
        "{\"id\":\"a\",\"n\":1}\n\nnot json\n{\"id\":\"b\"}\n{\"id\":\"a\",\"n\":2}\n{\"id\":\"c\",\"n\":0}\n{\"id\":\"d\",\"n\":3}\n{\"id\":\"e\",\"n\":\"x\"}\n",
    );
    let d = load::<R>(f.path(), false).expect("loads");
    let ids: Vec<&str> = d.rows.iter().map(|(_, r)| r.id.as_str()).collect();
    assert_eq!(ids, ["a", "d"]);
    assert_eq!(d.rows[1].0, 7);
    let got: Vec<(usize, Option<&str>)> = d
        .refused
        .iter()
        .map(|r| (r.line, r.id.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            (3, None),
            (4, Some("b")),
            (5, Some("a")),
            (6, Some("c")),
            (8, Some("e"))
        ]
    );
    assert!(d.refused[0]
        .reason
        .starts_with("the line is not valid JSON"));
    assert_eq!(d.refused[1].reason, "missing field `n`");
    assert_eq!(
        d.refused[2].reason,
        "`id` must be unique. Given: `a`, already the id of line 1"
    );
    assert_eq!(d.refused[3].reason, "`n` must be at least 1. Given: `0`");
    assert_eq!(
        d.refused[4].reason,
        "`n`: invalid type: string \"x\", expected u32"
    );
    assert_eq!(d.refused[0].label(), "line 3");
    assert_eq!(d.sha256.len(), 64);
}

#[test]
fn strict_fails_on_the_first_bad_line() {
    let f = write("{\"id\":\"a\",\"n\":1}\nnope\n");
    match load::<R>(f.path(), true) {
        Err(BenchError::Row { line, .. }) => assert_eq!(line, 2),
        other => panic!("expected a row error, got {other:?}"),
    }
    let empty = write("\n\n");
    assert!(matches!(
        load::<R>(empty.path(), false),
        Err(BenchError::Empty(_))
    ));
}

/// A file whose every line is refused loads, so the refusals are reported
/// instead of a bare "no usable rows".
#[test]
fn a_wholly_refused_file_loads_with_no_rows() {
    let f = write("{\"id\":\"a\",\"n\":0}\n[1]\n");
    let d = load::<R>(f.path(), false).expect("loads");
    assert!(d.rows.is_empty());
    assert_eq!(d.refused.len(), 2);
    assert_eq!(
        d.refused[1].reason,
        "the line must be a JSON object (one row). Given: `[1]`"
    );
}

#[test]
fn the_window_counts_refused_lines_as_rows() {
    let f = write("{\"id\":\"a\",\"n\":1}\n{\"id\":\"b\",\"n\":0}\n{\"id\":\"c\",\"n\":1}\n{\"id\":\"d\",\"n\":1}\n");
    let mut d = load::<R>(f.path(), false).expect("loads");
    d.window(1, Some(2));
    let ids: Vec<&str> = d.rows.iter().map(|(_, r)| r.id.as_str()).collect();
    assert_eq!(ids, ["c"]);
    assert_eq!(d.refused.len(), 1);
    assert_eq!(d.refused[0].id.as_deref(), Some("b"));
    let mut d = load::<R>(f.path(), false).expect("loads");
    d.window(2, None);
    assert_eq!(d.rows.len(), 2);
    assert!(d.refused.is_empty());
}

#[test]
fn shards_split_refused_lines_by_id_and_shard_0_keeps_those_without() {
    let f = write("oops\n{\"id\":\"x1\",\"n\":0}\n{\"id\":\"x2\",\"n\":0}\n{\"id\":\"x3\",\"n\":0}\n{\"id\":\"ok\",\"n\":1}\n");
    let whole = load::<R>(f.path(), false).expect("loads");
    let mut lines = Vec::new();
    for i in 0..2 {
        let sh = Shard::new(i, 2).expect("shard");
        let mut d = whole.clone();
        d.keep_shard(sh);
        for r in &d.refused {
            match &r.id {
                Some(id) => assert!(sh.contains(id)),
                None => assert_eq!(i, 0, "an id-less line belongs to shard 0"),
            }
        }
        lines.extend(d.refused.iter().map(|r| r.line));
    }
    lines.sort_unstable();
    assert_eq!(
        lines,
        [1, 2, 3, 4],
        "every refused line in exactly one shard"
    );
}

#[test]
fn old_receipts_skipped_lines_read_as_refusals() {
    let r: Refused = serde_json::from_value(json!({"line": 3, "message": "bad"})).expect("reads");
    assert_eq!(
        r,
        Refused {
            line: 3,
            id: None,
            reason: "bad".into()
        }
    );
}
