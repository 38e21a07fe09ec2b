//! An access token from the GCE/Cloud Run metadata server (serving.md §10.1
//! step 2), for buckets that are not public.

use std::time::Duration;

use serde::Deserialize;

use crate::error::StageError;

/// Default metadata server host; `GCE_METADATA_HOST` overrides it (the name
/// Google's client libraries use).
pub const METADATA_HOST: &str = "metadata.google.internal";

/// How long the metadata server may take to answer.
pub const METADATA_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
}

/// Fetch the default service account's access token from `host`
/// (`/computeMetadata/v1/instance/service-accounts/default/token`,
/// header `Metadata-Flavor: Google`), within [`METADATA_TIMEOUT`].
///
/// # Errors
/// [`StageError::Http`] when the server is unreachable (not on GCP) or answers
/// with an error; [`StageError::Manifest`] when the body has no `access_token`.
pub async fn metadata_token(host: &str) -> Result<String, StageError> {
    let url = format!("http://{host}/computeMetadata/v1/instance/service-accounts/default/token");
    let client = reqwest::Client::builder()
        .timeout(METADATA_TIMEOUT)
        .build()
        .map_err(|e| StageError::from_reqwest(&url, &e))?;
    let resp = client
        .get(&url)
        .header("Metadata-Flavor", "Google")
        .send()
        .await
        .map_err(|e| StageError::from_reqwest(&url, &e))?;
    let status = resp.status();
    let body = resp
        .bytes()
        .await
        .map_err(|e| StageError::from_reqwest(&url, &e))?;
    if !status.is_success() {
        return Err(StageError::status(
            &url,
            status.as_u16(),
            &String::from_utf8_lossy(&body),
        ));
    }
    let t: TokenResponse = serde_json::from_slice(&body).map_err(|e| StageError::Manifest {
        origin: url.clone(),
        message: format!("no `access_token`: {e}"),
    })?;
    Ok(t.access_token)
}
