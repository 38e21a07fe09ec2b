//! The JSON Schema of a request type, and the field names read from it, so
//! that the list of keys a surface accepts is never written by hand; and
//! the one serde read of a group of request keys ([`from_keys`]).

use schemars::JsonSchema;
use serde_json::{Map, Value};

use crate::error::SchemaError;

/// `T`'s JSON Schema (draft 2020-12) as a JSON object, every subschema
/// inlined (no `$ref`), as tool input schemas and key lists need it.
pub fn schema_of<T: JsonSchema>() -> Map<String, Value> {
    let settings = schemars::generate::SchemaSettings::draft2020_12().with(|s| {
        s.inline_subschemas = true;
    });
    let root = settings.into_generator().into_root_schema_for::<T>();
    match serde_json::to_value(root) {
        Ok(Value::Object(o)) => o,
        _ => Map::new(),
    }
}

/// The top-level property names of `T`'s JSON Schema, in declaration order
/// (flattened fields inlined where they are declared).
pub fn properties<T: JsonSchema>() -> Vec<String> {
    schema_of::<T>()
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// `T` read by serde from the keys of `obj` named in `keys` (other keys are
/// ignored), in the order of `keys`, so that when several are bad the same
/// one is reported whatever order the client wrote them in. The error names
/// the key at fault: "`layout` must be one of [document_first,
/// schema_first]. Given: \"sideways\"".
///
/// # Errors
/// [`SchemaError`] naming the key, what it must be and the value given.
pub fn from_keys<T: serde::de::DeserializeOwned>(
    obj: &Map<String, Value>,
    keys: &[String],
) -> Result<T, SchemaError> {
    let ordered: Map<String, Value> = keys
        .iter()
        .filter_map(|k| obj.get(k).map(|v| (k.clone(), v.clone())))
        .collect();
    serde_path_to_error::deserialize(&ordered).map_err(|e| {
        let field = e.path().to_string();
        SchemaError::new(field.clone(), format!("`{field}` {}", e.inner()))
    })
}
