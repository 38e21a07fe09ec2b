//! Vertex AI dedicated endpoint URLs (reference.md §2.7): a bare endpoint id, a
//! `projects/<p>/locations/<r>/endpoints/<id>` resource name or a full URL
//! becomes the `…/invoke` base the gateway posts `/v1/chat/completions` to and
//! probes `/health` on.

use crate::error::GatewayError;

/// Default region when none is given (`GCP_REGION`).
pub const DEFAULT_REGION: &str = "us-central1";

/// Hosts a Vertex URL may have.
const VERTEX_HOSTS: [&str; 2] = [".prediction.vertexai.goog", ".aiplatform.googleapis.com"];

/// The `…/invoke` base URL of a dedicated endpoint.
pub fn invoke_base(endpoint_id: &str, region: &str, project_number: &str) -> String {
    format!(
        "https://{endpoint_id}.{region}-{project_number}.prediction.vertexai.goog/v1/projects/{project_number}/locations/{region}/endpoints/{endpoint_id}/invoke"
    )
}

/// Resolve `spec` (id, resource name or URL) to the `…/invoke` base.
///
/// # Errors
/// [`GatewayError::Config`] for a URL that is not https or not a Vertex host,
/// a URL without `/invoke`, a non-numeric id, or a missing project number.
pub fn resolve(
    spec: &str,
    region: &str,
    project_number: Option<&str>,
) -> Result<String, GatewayError> {
    let spec = spec.trim();
    let bad = |why: &str| GatewayError::Config(format!("`--vertex-url` {why}. Given: `{spec}`"));
    if spec.contains("://") {
        let Some(rest) = spec.strip_prefix("https://") else {
            return Err(bad("must use https"));
        };
        let host = rest.split('/').next().unwrap_or("");
        if !VERTEX_HOSTS.iter().any(|h| host.ends_with(h)) {
            return Err(bad(
                "must be on *.prediction.vertexai.goog or *.aiplatform.googleapis.com",
            ));
        }
        let Some(at) = spec.find("/invoke") else {
            return Err(bad(
                "must be a dedicated endpoint URL containing `/invoke` (or pass the endpoint id)",
            ));
        };
        return Ok(spec[..at + "/invoke".len()].to_string());
    }
    let parts: Vec<&str> = spec.split('/').collect();
    let (proj, region, id) = match parts.as_slice() {
        ["projects", p, "locations", r, "endpoints", id] => (Some(*p), *r, *id),
        [id] => (project_number, region, *id),
        _ => return Err(bad(
            "must be an endpoint id, `projects/<p>/locations/<r>/endpoints/<id>` or an /invoke URL",
        )),
    };
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad("endpoint id must be digits"));
    }
    let Some(proj) = proj.filter(|p| !p.is_empty()) else {
        return Err(bad(
            "requires GCP_PROJECT_NUMBER (`--project-number`) or pass the full /invoke URL",
        ));
    };
    Ok(invoke_base(id, region, proj))
}

/// Whether `url` is a Vertex endpoint URL (reference.md §2.7 `IsVertexEndpointURL`).
pub fn is_vertex_url(url: &str) -> bool {
    let u = url.to_ascii_lowercase();
    u.contains("prediction.vertexai.goog")
        || u.contains("aiplatform.googleapis.com")
        || u.contains("/invoke/")
        || [
            ("/invoke"),
            (":rawpredict"),
            (":streamrawpredict"),
            (":predict"),
        ]
        .iter()
        .any(|s| u.ends_with(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "https://123.us-central1-456.prediction.vertexai.goog/v1/projects/456/locations/us-central1/endpoints/123/invoke";

    #[test]
    fn resolves_ids_names_and_urls() {
        assert_eq!(
            resolve("123", "us-central1", Some("456")).ok().as_deref(),
            Some(BASE)
        );
        assert_eq!(
            resolve(
                "projects/456/locations/us-central1/endpoints/123",
                "europe-west4",
                None
            )
            .ok()
            .as_deref(),
            Some(BASE)
        );
        assert_eq!(
            resolve(&format!("{BASE}/v1/chat/completions"), "x", None)
                .ok()
                .as_deref(),
            Some(BASE)
        );
        assert!(is_vertex_url(BASE));
        assert!(!is_vertex_url("https://svc-abc.a.run.app"));
    }

    #[test]
    fn refuses_bad_specs() {
        let msg = |s: &str, p: Option<&str>| {
            resolve(s, "us-central1", p)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(msg("123", None).contains("requires GCP_PROJECT_NUMBER"));
        assert!(
            msg("http://123.x.prediction.vertexai.goog/invoke", None).contains("must use https")
        );
        assert!(msg("https://evil.example.com/invoke", None).contains("must be on"));
        assert!(msg("abc", Some("1")).contains("digits"));
    }
}
