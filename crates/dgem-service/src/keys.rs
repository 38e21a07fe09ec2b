//! The JSON Schema of a request type, and the field names read from it, so
//! that the list of keys a surface accepts is never written by hand.

use schemars::JsonSchema;
use serde_json::{Map, Value};

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
