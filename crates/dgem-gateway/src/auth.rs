//! Bearer tokens for Google Cloud targets (reference.md §2.8).
//!
//! * Vertex gets an OAuth2 **access token** (scope `cloud-platform`).
//! * Cloud Run gets an OIDC **identity token** whose audience is the service URL.
//!
//! Sources, in order: an explicit token (env), the metadata server (GCE, Cloud
//! Run, GKE), a service-account key file (an RS256-signed JWT exchanged at the
//! key's `token_uri`), then the `gcloud` CLI. A token is cached until
//! [`REFRESH_MARGIN`] before it expires. Tokens never appear in logs, errors or
//! `Debug` output.

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// Scope of Vertex access tokens.
pub const CLOUD_PLATFORM_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// Default metadata server.
pub const METADATA_BASE: &str = "http://metadata.google.internal";
/// A cached token is renewed this long before it expires.
pub const REFRESH_MARGIN: Duration = Duration::from_secs(60);
/// Lifetime assumed for a token whose expiry is unknown (gcloud, env): 45 min.
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(45 * 60);

/// Why no token could be had.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct AuthError(pub String);

/// Something that yields a bearer token for a target.
#[async_trait]
pub trait BearerSource: Send + Sync {
    /// A token valid now (without the `Bearer ` prefix).
    ///
    /// # Errors
    /// [`AuthError`] when every source failed.
    async fn bearer(&self) -> Result<String, AuthError>;

    /// What kind of token this is, for logs (never the token itself).
    fn describe(&self) -> String;
}

/// A fixed token (`--token`, `DGEM_TOKEN`).
pub struct StaticToken(pub String);

impl std::fmt::Debug for StaticToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StaticToken(<redacted>)")
    }
}

#[async_trait]
impl BearerSource for StaticToken {
    async fn bearer(&self) -> Result<String, AuthError> {
        Ok(self.0.trim_start_matches("Bearer ").to_string())
    }

    fn describe(&self) -> String {
        "static token".into()
    }
}

/// Which token to mint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenKind {
    /// OAuth2 access token, `cloud-platform` scope (Vertex).
    Access,
    /// OIDC identity token for `audience` (Cloud Run: `scheme://host`).
    Identity {
        /// The audience claim.
        audience: String,
    },
}

/// Where tokens may come from.
#[derive(Clone, Default)]
pub struct AuthConfig {
    /// An explicit token (`GOOGLE_OAUTH_ACCESS_TOKEN` for access, `DGEM_ID_TOKEN` for identity).
    pub explicit: Option<String>,
    /// Metadata server base (`GCE_METADATA_HOST` or [`METADATA_BASE`]); `None` skips it.
    pub metadata_base: Option<String>,
    /// Service-account key file (`GOOGLE_APPLICATION_CREDENTIALS`).
    pub key_file: Option<PathBuf>,
    /// Whether to try the `gcloud` CLI last.
    pub gcloud: bool,
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("explicit", &self.explicit.as_ref().map(|_| "<redacted>"))
            .field("metadata_base", &self.metadata_base)
            .field("key_file", &self.key_file)
            .field("gcloud", &self.gcloud)
            .finish()
    }
}

impl AuthConfig {
    /// Sources from the environment for `kind`.
    pub fn from_env(kind: &TokenKind) -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let explicit = match kind {
            TokenKind::Access => var("GOOGLE_OAUTH_ACCESS_TOKEN"),
            TokenKind::Identity { .. } => var("DGEM_ID_TOKEN"),
        };
        let metadata_base = Some(
            var("GCE_METADATA_HOST")
                .map(|h| {
                    if h.contains("://") {
                        h
                    } else {
                        format!("http://{h}")
                    }
                })
                .unwrap_or_else(|| METADATA_BASE.into()),
        );
        Self {
            explicit,
            metadata_base,
            key_file: var("GOOGLE_APPLICATION_CREDENTIALS").map(PathBuf::from),
            gcloud: true,
        }
    }
}

/// Mints and caches one kind of token from the configured sources.
pub struct TokenProvider {
    kind: TokenKind,
    config: AuthConfig,
    client: reqwest::Client,
    cache: Mutex<Option<(String, Instant)>>,
}

impl std::fmt::Debug for TokenProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenProvider")
            .field("kind", &self.kind)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct KeyFile {
    #[serde(rename = "type")]
    kind: String,
    client_email: String,
    private_key: String,
    #[serde(default = "default_token_uri")]
    token_uri: String,
}

fn default_token_uri() -> String {
    "https://oauth2.googleapis.com/token".into()
}

#[derive(serde::Serialize)]
struct Claims<'a> {
    iss: &'a str,
    aud: &'a str,
    iat: u64,
    exp: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    scope: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_audience: Option<&'a str>,
}

impl TokenProvider {
    /// A provider of `kind` tokens from `config`.
    pub fn new(kind: TokenKind, config: AuthConfig) -> Self {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        Self {
            kind,
            config,
            client,
            cache: Mutex::new(None),
        }
    }

    /// Mint a token now, trying each source in order; returns it with its lifetime.
    async fn mint(&self) -> Result<(String, Duration), AuthError> {
        if let Some(t) = &self.config.explicit {
            return Ok((
                t.trim_start_matches("Bearer ").to_string(),
                DEFAULT_LIFETIME,
            ));
        }
        let mut tried = Vec::new();
        if let Some(base) = &self.config.metadata_base {
            match self.via_metadata(base).await {
                Ok(t) => return Ok(t),
                Err(e) => tried.push(format!("metadata server: {e}")),
            }
        }
        if let Some(path) = &self.config.key_file {
            match self.via_key_file(path).await {
                Ok(t) => return Ok(t),
                Err(e) => tried.push(format!("key file {}: {e}", path.display())),
            }
        }
        if self.config.gcloud {
            match self.via_gcloud().await {
                Ok(t) => return Ok(t),
                Err(e) => tried.push(format!("gcloud: {e}")),
            }
        }
        Err(AuthError(format!(
            "no {} token from any source ({})",
            self.describe(),
            tried.join("; ")
        )))
    }

    async fn via_metadata(&self, base: &str) -> Result<(String, Duration), AuthError> {
        let sa = format!("{base}/computeMetadata/v1/instance/service-accounts/default");
        let req = match &self.kind {
            TokenKind::Access => self.client.get(format!("{sa}/token")),
            TokenKind::Identity { audience } => self
                .client
                .get(format!("{sa}/identity"))
                .query(&[("audience", audience.as_str()), ("format", "full")]),
        };
        let resp = req
            .header("Metadata-Flavor", "Google")
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .map_err(|e| AuthError(format!("unreachable ({})", e.without_url())))?;
        if !resp.status().is_success() {
            return Err(AuthError(format!(
                "answered HTTP {}",
                resp.status().as_u16()
            )));
        }
        match &self.kind {
            TokenKind::Access => {
                let v: Value = resp
                    .json()
                    .await
                    .map_err(|e| AuthError(format!("bad JSON: {}", e.without_url())))?;
                access_from_json(&v)
            }
            TokenKind::Identity { .. } => {
                let t = resp
                    .text()
                    .await
                    .map_err(|e| AuthError(e.without_url().to_string()))?;
                let t = t.trim().to_string();
                let life = jwt_lifetime(&t).unwrap_or(DEFAULT_LIFETIME);
                Ok((t, life))
            }
        }
    }

    async fn via_key_file(&self, path: &std::path::Path) -> Result<(String, Duration), AuthError> {
        let text = tokio::fs::read_to_string(path)
            .await
            .map_err(|e| AuthError(format!("unreadable: {e}")))?;
        let key: KeyFile = serde_json::from_str(&text)
            .map_err(|e| AuthError(format!("not a service-account key: {e}")))?;
        if key.kind != "service_account" {
            return Err(AuthError(format!(
                "`type` must be `service_account`. Given: `{}`",
                key.kind
            )));
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let claims = Claims {
            iss: &key.client_email,
            aud: &key.token_uri,
            iat: now,
            exp: now + 3600,
            scope: matches!(self.kind, TokenKind::Access).then_some(CLOUD_PLATFORM_SCOPE),
            target_audience: match &self.kind {
                TokenKind::Identity { audience } => Some(audience.as_str()),
                TokenKind::Access => None,
            },
        };
        let signing = jsonwebtoken::EncodingKey::from_rsa_pem(key.private_key.as_bytes())
            .map_err(|e| AuthError(format!("`private_key` is not an RSA PEM key: {e}")))?;
        let assertion = jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256),
            &claims,
            &signing,
        )
        .map_err(|e| AuthError(format!("signing the JWT failed: {e}")))?;
        let body = format!(
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={assertion}"
        );
        let resp = self
            .client
            .post(&key.token_uri)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .map_err(|e| AuthError(format!("token endpoint unreachable ({})", e.without_url())))?;
        if !resp.status().is_success() {
            return Err(AuthError(format!(
                "token endpoint answered HTTP {}",
                resp.status().as_u16()
            )));
        }
        let v: Value = resp
            .json()
            .await
            .map_err(|e| AuthError(format!("bad JSON: {}", e.without_url())))?;
        match &self.kind {
            TokenKind::Access => access_from_json(&v),
            TokenKind::Identity { .. } => {
                let t = v
                    .get("id_token")
                    .and_then(Value::as_str)
                    .ok_or_else(|| AuthError("token endpoint reply has no `id_token`".into()))?;
                Ok((t.to_string(), jwt_lifetime(t).unwrap_or(DEFAULT_LIFETIME)))
            }
        }
    }

    async fn via_gcloud(&self) -> Result<(String, Duration), AuthError> {
        let mut cmd = tokio::process::Command::new("gcloud");
        match &self.kind {
            TokenKind::Access => cmd.args(["auth", "print-access-token"]),
            TokenKind::Identity { audience } => cmd
                .args(["auth", "print-identity-token"])
                .arg(format!("--audiences={audience}")),
        };
        cmd.kill_on_drop(true).stdin(std::process::Stdio::null());
        let out = tokio::time::timeout(Duration::from_secs(20), cmd.output())
            .await
            .map_err(|_| AuthError("timed out after 20 s".into()))?
            .map_err(|e| AuthError(format!("could not run: {e}")))?;
        if !out.status.success() {
            return Err(AuthError(format!("exited with {}", out.status)));
        }
        let t = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if t.is_empty() {
            return Err(AuthError("printed no token".into()));
        }
        let life = jwt_lifetime(&t).unwrap_or(DEFAULT_LIFETIME);
        Ok((t, life))
    }
}

fn access_from_json(v: &Value) -> Result<(String, Duration), AuthError> {
    let t = v
        .get("access_token")
        .and_then(Value::as_str)
        .ok_or_else(|| AuthError("reply has no `access_token`".into()))?;
    let life = v
        .get("expires_in")
        .and_then(Value::as_u64)
        .map_or(DEFAULT_LIFETIME, Duration::from_secs);
    Ok((t.to_string(), life))
}

/// Seconds until the `exp` claim of a JWT (unverified: only used for caching).
fn jwt_lifetime(token: &str) -> Option<Duration> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let exp = serde_json::from_slice::<Value>(&bytes)
        .ok()?
        .get("exp")?
        .as_u64()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs();
    Some(Duration::from_secs(exp.saturating_sub(now)))
}

#[async_trait]
impl BearerSource for TokenProvider {
    async fn bearer(&self) -> Result<String, AuthError> {
        let mut cache = self.cache.lock().await;
        if let Some((t, until)) = cache.as_ref() {
            if Instant::now() + REFRESH_MARGIN < *until {
                return Ok(t.clone());
            }
        }
        let (token, life) = self.mint().await?;
        tracing::debug!(kind = %self.describe(), lifetime_s = life.as_secs(), "minted token");
        *cache = Some((token.clone(), Instant::now() + life));
        Ok(token)
    }

    fn describe(&self) -> String {
        match &self.kind {
            TokenKind::Access => "access (cloud-platform)".into(),
            TokenKind::Identity { audience } => format!("identity (audience {audience})"),
        }
    }
}

/// The audience of an identity token for `url`: `scheme://host[:port]`.
pub fn audience_of(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("https", url));
    let host = rest.split('/').next().unwrap_or(rest);
    format!("{scheme}://{host}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audience_is_scheme_and_host() {
        assert_eq!(
            audience_of("https://svc-x.a.run.app/v1/chat"),
            "https://svc-x.a.run.app"
        );
        assert_eq!(
            audience_of("http://127.0.0.1:8080"),
            "http://127.0.0.1:8080"
        );
    }

    #[test]
    fn secrets_are_redacted_in_debug() {
        let cfg = AuthConfig {
            explicit: Some("ya29.secret".into()),
            ..AuthConfig::default()
        };
        let p = TokenProvider::new(TokenKind::Access, cfg);
        assert!(!format!("{p:?}").contains("ya29"));
        assert!(!format!("{:?}", StaticToken("ya29.secret".into())).contains("ya29"));
    }
}
