//! One backend's row of `/api/health` (moved from `routing.rs` unchanged).

use dgem_backend::Health;
use serde::Serialize;

use crate::breaker::BreakerState;
use crate::replica::Kind;

/// One row of `/api/health`: `name`, `kind`, `url`, `phase`, `ready`,
/// `bytes_staged_gb` (GB, when reported), `detail` (why a probe failed) and
/// `breaker`.
#[derive(Debug, Clone)]
pub struct BackendStatus {
    /// Backend name.
    pub name: String,
    /// Its kind.
    pub kind: Kind,
    /// Replica URL.
    pub url: String,
    /// Health probe result.
    pub health: Health,
    /// Breaker state.
    pub breaker: BreakerState,
}

impl Serialize for BackendStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("name", &self.name)?;
        m.serialize_entry("kind", &self.kind)?;
        m.serialize_entry("url", &self.url)?;
        m.serialize_entry("phase", self.health.phase())?;
        m.serialize_entry("ready", &self.health.is_ready())?;
        match &self.health {
            Health::Ready => {}
            Health::Starting {
                bytes_staged_gb, ..
            } => {
                if let Some(gb) = bytes_staged_gb {
                    m.serialize_entry("bytes_staged_gb", gb)?;
                }
            }
            Health::Failed { reason, .. } => m.serialize_entry("detail", reason)?,
        }
        m.serialize_entry("breaker", &self.breaker)?;
        m.end()
    }
}
