//! The field names of a request type, read from its derived JSON Schema, so
//! that the list of keys a surface accepts is never written by hand.

use schemars::JsonSchema;
use serde_json::Value;

/// The top-level property names of `T`'s JSON Schema, in declaration order
/// (flattened fields inlined where they are declared).
pub fn properties<T: JsonSchema>() -> Vec<String> {
    let settings = schemars::generate::SchemaSettings::draft2020_12().with(|s| {
        s.inline_subschemas = true;
    });
    let root = settings.into_generator().into_root_schema_for::<T>();
    let value = serde_json::to_value(root).unwrap_or(Value::Null);
    value
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}
