//! The JSON Schema of a request type and the field names read from it
//! ([`dgem_core::keys`], where they are written once for every crate that
//! declares request keys), and the one serde read of a group of request
//! keys as a service error.

use serde_json::{Map, Value};

pub use dgem_core::keys::{properties, schema_of};

use crate::error::ServiceError;

/// [`dgem_core::keys::from_keys`], its error as a [`ServiceError::Field`].
///
/// # Errors
/// [`ServiceError::Field`] naming the key, what it must be and the value
/// given.
pub(crate) fn from_keys<T: serde::de::DeserializeOwned>(
    obj: &Map<String, Value>,
    keys: &[String],
) -> Result<T, ServiceError> {
    dgem_core::keys::from_keys(obj, keys).map_err(ServiceError::from_schema_error)
}
