//! Input rows of `dgem batch`.
//!
//! Three forms, told apart by [`InputFormat::detect`] unless named:
//!
//! - **JSON Lines**: one JSON object per line. Its fields are the policy's
//!   variables (or, with ad-hoc questions, what the state is made of); the
//!   id field (default `id`) names the row and is not a variable.
//! - **CSV**: a header row, then one record per row; every cell is a string.
//! - **OpenAI Batch**: `{"custom_id", "method": "POST", "url":
//!   "/v1/chat/completions", "body"}` per line, as OpenAI's Batch API takes
//!   it; the body is decided as `dgem serve`'s chat route decides it.
//!
//! Blank lines are not rows. A row without an id is named by its line:
//! `line-7` (1-based, as an editor shows it). A row that cannot be read (not
//! JSON, not an object, a mapped field missing, a bad id) is a
//! [`RowError`], written to the output as that row's error; only an
//! unreadable file stops the job ([`BenchError::Io`]).

use std::fs::File;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::BenchError;

/// The one route an OpenAI Batch row may name: dgem decides chat bodies.
pub const OPENAI_URL: &str = "/v1/chat/completions";

/// The form of an input file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputFormat {
    /// One JSON object of fields per line.
    Jsonl,
    /// A header row, then one record per row.
    Csv,
    /// OpenAI Batch request lines (`custom_id`, `method`, `url`, `body`).
    Openai,
}

impl InputFormat {
    /// The names `--input-format` takes, besides `auto`.
    pub const NAMES: [&'static str; 3] = ["jsonl", "csv", "openai"];

    /// Parse a `--input-format` value; `auto` is `None` (detect it).
    ///
    /// # Errors
    /// [`BenchError::Invalid`] naming the flag, the allowed values and the value given.
    pub fn parse(s: &str) -> Result<Option<Self>, BenchError> {
        match s.trim() {
            "auto" => Ok(None),
            "jsonl" | "json" | "ndjson" => Ok(Some(Self::Jsonl)),
            "csv" => Ok(Some(Self::Csv)),
            "openai" => Ok(Some(Self::Openai)),
            other => Err(BenchError::Invalid(format!(
                "`--input-format` must be one of auto, {}. Given: `{other}`",
                Self::NAMES.join(", ")
            ))),
        }
    }

    /// The form of `path`: CSV by its `.csv` suffix; else OpenAI Batch when
    /// the first non-blank line is an object with `custom_id` and `body`;
    /// else JSON Lines.
    pub fn detect(path: &Path, first_line: Option<&str>) -> Self {
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
        {
            return Self::Csv;
        }
        let openai = first_line
            .and_then(|l| serde_json::from_str::<Value>(l).ok())
            .is_some_and(|v| v.get("custom_id").is_some() && v.get("body").is_some());
        if openai {
            Self::Openai
        } else {
            Self::Jsonl
        }
    }
}

/// How rows become variables.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct RowSpec {
    /// The field that names a row (`--id-field`, default `id`; OpenAI Batch
    /// rows always use `custom_id`).
    pub id_field: String,
    /// `(variable, field)` pairs from `--map VAR=FIELD`. Empty: every field
    /// but the id is a variable under its own name. Given: exactly the
    /// mapped fields are, under the mapped names.
    pub map: Vec<(String, String)>,
}

/// What one row asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// The row's variables (with ad-hoc questions: what the state is made of).
    Fields(Map<String, Value>),
    /// An OpenAI chat-completions body.
    Chat(Value),
}

/// Why a row cannot be decided, as its output line says it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RowError {
    /// The field at fault: an input field (`ticket`, `custom_id`), a request
    /// key (`variables`, `questions[0].type`), or `line` for a line that is
    /// not a JSON object.
    pub field: String,
    /// What is wrong, naming the field, the allowed values and the value given.
    pub message: String,
}

impl RowError {
    /// A row error on `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// One input row.
#[derive(Debug, Clone, PartialEq)]
pub struct InputRow {
    /// 0-based position among the file's rows (blank lines are not rows).
    pub index: usize,
    /// 1-based line of the file (for CSV, the line the record starts on).
    pub line: usize,
    /// The row's id: its id field, else `line-N`.
    pub id: String,
    /// What the row asks for, or why it cannot be decided.
    pub item: Result<Item, RowError>,
}

/// The rows of an input file, read one at a time.
pub struct Rows {
    path: PathBuf,
    format: InputFormat,
    spec: RowSpec,
    index: usize,
    source: Source,
}

impl std::fmt::Debug for Rows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rows")
            .field("path", &self.path)
            .field("format", &self.format)
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

enum Source {
    Lines {
        reader: BufReader<File>,
        line: usize,
    },
    Csv {
        records: csv::StringRecordsIntoIter<File>,
        headers: Vec<String>,
    },
}

fn io(path: &Path, source: std::io::Error) -> BenchError {
    BenchError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The first non-blank line of `path` (for [`InputFormat::detect`]).
fn first_line(path: &Path) -> Result<Option<String>, BenchError> {
    let mut reader = BufReader::new(File::open(path).map_err(|e| io(path, e))?);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        if reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| io(path, e))?
            == 0
        {
            return Ok(None);
        }
        let text = String::from_utf8_lossy(&buf);
        if !text.trim().is_empty() {
            return Ok(Some(text.trim().to_string()));
        }
    }
}

/// Open `path` as `format` (`None`: [`InputFormat::detect`]).
///
/// # Errors
/// [`BenchError::Io`] when the file cannot be opened or (CSV) its header
/// cannot be read; [`BenchError::Invalid`] for a CSV header that repeats a
/// column or lacks a mapped one.
pub fn open(path: &Path, format: Option<InputFormat>, spec: RowSpec) -> Result<Rows, BenchError> {
    let format = match format {
        Some(f) => f,
        None => InputFormat::detect(path, first_line(path)?.as_deref()),
    };
    let file = File::open(path).map_err(|e| io(path, e))?;
    let source = match format {
        InputFormat::Csv => {
            let mut reader = csv::ReaderBuilder::new().flexible(false).from_reader(file);
            let headers: Vec<String> = reader
                .headers()
                .map_err(|e| BenchError::Invalid(format!("`--input` {}: {e}", path.display())))?
                .iter()
                .map(|h| h.trim().to_string())
                .collect();
            check_headers(path, &headers, &spec)?;
            Source::Csv {
                records: reader.into_records(),
                headers,
            }
        }
        InputFormat::Jsonl | InputFormat::Openai => Source::Lines {
            reader: BufReader::new(file),
            line: 0,
        },
    };
    Ok(Rows {
        path: path.to_path_buf(),
        format,
        spec,
        index: 0,
        source,
    })
}

/// A CSV header must name each column once and hold every mapped field: a
/// missing column would fail every row, so it is refused up front.
fn check_headers(path: &Path, headers: &[String], spec: &RowSpec) -> Result<(), BenchError> {
    for (i, h) in headers.iter().enumerate() {
        if headers[..i].contains(h) {
            return Err(BenchError::Invalid(format!(
                "`--input` {}: the CSV header names column `{h}` twice",
                path.display()
            )));
        }
    }
    // The default id column may be absent (rows are then named by line);
    // one named with `--id-field` must be there.
    if spec.id_field != "id" && !headers.contains(&spec.id_field) {
        return Err(BenchError::Invalid(format!(
            "`--id-field {}`: the CSV header of {} has no column `{}`; its columns: {}",
            spec.id_field,
            path.display(),
            spec.id_field,
            headers.join(", ")
        )));
    }
    for (var, field) in &spec.map {
        if !headers.contains(field) {
            return Err(BenchError::Invalid(format!(
                "`--map {var}={field}`: the CSV header of {} has no column `{field}`; its columns: {}",
                path.display(),
                headers.join(", ")
            )));
        }
    }
    Ok(())
}

impl Rows {
    /// The form being read.
    pub fn format(&self) -> InputFormat {
        self.format
    }

    /// The next JSON Lines row: `None` at the end of the file.
    fn next_line(&mut self) -> Option<Result<InputRow, BenchError>> {
        let Source::Lines { reader, line } = &mut self.source else {
            return None;
        };
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => return Some(Err(io(&self.path, e))),
            }
            *line += 1;
            let at = *line;
            let index = self.index;
            let text = match std::str::from_utf8(&buf) {
                Ok(t) => t.trim(),
                Err(e) => {
                    self.index += 1;
                    return Some(Ok(bad(
                        index,
                        at,
                        RowError::new("line", format!("line {at} is not UTF-8: {e}")),
                    )));
                }
            };
            if text.is_empty() {
                continue;
            }
            self.index += 1;
            let row = match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(obj)) => match self.format {
                    InputFormat::Openai => openai_row(index, at, obj),
                    _ => fields_row(index, at, obj, &self.spec),
                },
                Ok(other) => bad(
                    index,
                    at,
                    RowError::new(
                        "line",
                        format!(
                            "line {at} must be a JSON object of fields. Given: {}",
                            kind_of(&other)
                        ),
                    ),
                ),
                Err(e) => bad(
                    index,
                    at,
                    RowError::new("line", format!("line {at} is not valid JSON: {e}")),
                ),
            };
            return Some(Ok(row));
        }
    }

    /// The next CSV record: `None` at the end of the file.
    fn next_record(&mut self) -> Option<Result<InputRow, BenchError>> {
        let Source::Csv { records, headers } = &mut self.source else {
            return None;
        };
        let record = records.next()?;
        let index = self.index;
        self.index += 1;
        let row = match record {
            Ok(r) => {
                let at = r.position().map_or(index + 2, |p| p.line() as usize);
                let obj: Map<String, Value> = headers
                    .iter()
                    .zip(r.iter())
                    .map(|(h, v)| (h.clone(), Value::String(v.to_string())))
                    .collect();
                fields_row(index, at, obj, &self.spec)
            }
            Err(e) => {
                let at = e.position().map_or(index + 2, |p| p.line() as usize);
                if let csv::ErrorKind::Io(_) = e.kind() {
                    return Some(Err(io(&self.path, std::io::Error::other(e.to_string()))));
                }
                bad(
                    index,
                    at,
                    RowError::new("line", format!("line {at} is not a CSV record: {e}")),
                )
            }
        };
        Some(Ok(row))
    }
}

impl Iterator for Rows {
    type Item = Result<InputRow, BenchError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.source {
            Source::Lines { .. } => self.next_line(),
            Source::Csv { .. } => self.next_record(),
        }
    }
}

fn bad(index: usize, line: usize, e: RowError) -> InputRow {
    InputRow {
        index,
        line,
        id: format!("line-{line}"),
        item: Err(e),
    }
}

/// A JSON type's name, for messages.
fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The id in `value` (a string, or a number written as JSON writes it).
fn id_of(field: &str, value: &Value) -> Result<String, RowError> {
    match value {
        Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        other => Err(RowError::new(
            field,
            format!(
                "`{field}` names the row and must be a non-empty string or a number. Given: {}",
                kind_of(other)
            ),
        )),
    }
}

/// A row of fields: its id, then its variables under `spec`.
fn fields_row(index: usize, line: usize, mut obj: Map<String, Value>, spec: &RowSpec) -> InputRow {
    let id = match obj.remove(&spec.id_field) {
        None => Ok(format!("line-{line}")),
        Some(v) => id_of(&spec.id_field, &v),
    };
    let id = match id {
        Ok(id) => id,
        Err(e) => return bad(index, line, e),
    };
    let item =
        if spec.map.is_empty() {
            Ok(Item::Fields(obj))
        } else {
            spec.map
                .iter()
                .map(|(var, field)| match obj.get(field) {
                    Some(v) => Ok((var.clone(), v.clone())),
                    None => Err(RowError::new(
                        field.clone(),
                        format!(
                        "the row has no field `{field}` (`--map {var}={field}`); its fields: {}",
                        obj.keys().map(String::as_str).collect::<Vec<_>>().join(", ")
                    ),
                    )),
                })
                .collect::<Result<Map<_, _>, _>>()
                .map(Item::Fields)
        };
    InputRow {
        index,
        line,
        id,
        item,
    }
}

/// An OpenAI Batch request line: `custom_id`, `method: "POST"`, `url:
/// "/v1/chat/completions"` and an object `body`.
fn openai_row(index: usize, line: usize, obj: Map<String, Value>) -> InputRow {
    let id = match obj.get("custom_id").map(|v| id_of("custom_id", v)) {
        Some(Ok(id)) => id,
        Some(Err(e)) => return bad(index, line, e),
        None => {
            return bad(
                index,
                line,
                RowError::new(
                    "custom_id",
                    "an OpenAI Batch line needs `custom_id`, the id its response line carries",
                ),
            )
        }
    };
    let check = || -> Result<Item, RowError> {
        match obj.get("method").and_then(Value::as_str) {
            Some("POST") | None => {}
            Some(other) => {
                return Err(RowError::new(
                    "method",
                    format!("`method` must be `POST`. Given: `{other}`"),
                ))
            }
        }
        match obj.get("url").and_then(Value::as_str) {
            Some(OPENAI_URL) => {}
            other => {
                return Err(RowError::new(
                    "url",
                    format!(
                        "`url` must be `{OPENAI_URL}` (dgem decides chat bodies). Given: {}",
                        other.map_or_else(|| "nothing".to_string(), |u| format!("`{u}`"))
                    ),
                ))
            }
        }
        match obj.get("body") {
            Some(body @ Value::Object(_)) => Ok(Item::Chat(body.clone())),
            other => Err(RowError::new(
                "body",
                format!(
                    "`body` must be a chat-completions request object. Given: {}",
                    other.map_or("nothing", kind_of)
                ),
            )),
        }
    };
    InputRow {
        index,
        line,
        id,
        item: check(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn rows(name: &str, text: &str, spec: RowSpec) -> Vec<InputRow> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        open(&p, None, spec).unwrap().map(Result::unwrap).collect()
    }

    fn spec() -> RowSpec {
        RowSpec {
            id_field: "id".into(),
            map: Vec::new(),
        }
    }

    #[test]
    fn jsonl_rows_take_their_id_and_keep_other_fields_as_variables() {
        let got = rows(
            "in.jsonl",
            "{\"id\": \"t1\", \"ticket\": \"refund\"}\n\n{\"ticket\": \"crash\"}\n{\"id\": 7, \"ticket\": \"x\"}\n",
            spec(),
        );
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].id, "t1");
        assert_eq!(
            got[0].item,
            Ok(Item::Fields(
                json!({"ticket": "refund"}).as_object().unwrap().clone()
            ))
        );
        // The blank line is not a row; the next is named by its line (3).
        assert_eq!(
            (got[1].index, got[1].line, got[1].id.as_str()),
            (1, 3, "line-3")
        );
        assert_eq!(got[2].id, "7");
    }

    #[test]
    fn bad_lines_are_row_errors_naming_the_line() {
        let got = rows("in.jsonl", "not json\n[1, 2]\n{\"id\": {}}\n", spec());
        assert_eq!(got.len(), 3);
        let e0 = got[0].item.clone().unwrap_err();
        assert_eq!(e0.field, "line");
        assert!(
            e0.message.starts_with("line 1 is not valid JSON"),
            "{}",
            e0.message
        );
        let e1 = got[1].item.clone().unwrap_err();
        assert!(e1.message.contains("an array"), "{}", e1.message);
        let e2 = got[2].item.clone().unwrap_err();
        assert_eq!(e2.field, "id");
        assert!(e2.message.contains("Given: an object"), "{}", e2.message);
    }

    #[test]
    fn map_takes_exactly_the_mapped_fields_and_names_a_missing_one() {
        let spec = RowSpec {
            id_field: "id".into(),
            map: vec![("ticket".into(), "body".into())],
        };
        let got = rows(
            "in.jsonl",
            "{\"body\": \"refund\", \"extra\": 1}\n{\"text\": \"x\"}\n",
            spec,
        );
        assert_eq!(
            got[0].item,
            Ok(Item::Fields(
                json!({"ticket": "refund"}).as_object().unwrap().clone()
            ))
        );
        let e = got[1].item.clone().unwrap_err();
        assert_eq!(e.field, "body");
        assert!(e.message.contains("`--map ticket=body`") && e.message.contains("text"));
    }

    #[test]
    fn csv_records_are_string_fields_and_a_missing_mapped_column_is_refused() {
        let got = rows(
            "in.csv",
            "id,ticket\na,\"charged, twice\"\nb,crash\n",
            spec(),
        );
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].id, "a");
        assert_eq!(
            got[0].item,
            Ok(Item::Fields(
                json!({"ticket": "charged, twice"})
                    .as_object()
                    .unwrap()
                    .clone()
            ))
        );
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("in.csv");
        std::fs::write(&p, "id,ticket\na,b\n").unwrap();
        let spec = RowSpec {
            id_field: "id".into(),
            map: vec![("ticket".into(), "body".into())],
        };
        let Err(e) = open(&p, None, spec) else {
            panic!("a missing mapped column must be refused")
        };
        assert!(e.to_string().contains("no column `body`"), "{e}");
    }

    #[test]
    fn openai_batch_lines_are_detected_and_checked() {
        let ok = json!({"custom_id": "r1", "method": "POST", "url": OPENAI_URL, "body": {"messages": []}});
        let bad_url =
            json!({"custom_id": "r2", "method": "POST", "url": "/v1/embeddings", "body": {}});
        let got = rows("in.jsonl", &format!("{ok}\n{bad_url}\n"), spec());
        assert_eq!(got[0].id, "r1");
        assert_eq!(got[0].item, Ok(Item::Chat(json!({"messages": []}))));
        let e = got[1].item.clone().unwrap_err();
        assert_eq!(e.field, "url");
        assert!(e.message.contains("`/v1/embeddings`"), "{}", e.message);
    }

    #[test]
    fn input_format_names_the_allowed_values() {
        assert_eq!(InputFormat::parse("csv").unwrap(), Some(InputFormat::Csv));
        assert_eq!(InputFormat::parse("auto").unwrap(), None);
        let e = InputFormat::parse("xml").unwrap_err().to_string();
        assert!(
            e.contains("jsonl, csv, openai") && e.contains("`xml`"),
            "{e}"
        );
    }
}
