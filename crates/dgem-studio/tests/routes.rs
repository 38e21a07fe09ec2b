//! The Studio routes serve the embedded page and assets with the right media
//! types, and the page loads nothing from another origin (no CDN).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt as _;
use tower::ServiceExt as _;

async fn get(path: &str) -> (StatusCode, String, String, String) {
    let resp = dgem_studio::router()
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    };
    let (ct, csp) = (header("content-type"), header("content-security-policy"));
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, ct, csp, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn serves_page_and_assets() {
    for path in ["/", "/index.html", "/studio/"] {
        let (status, ct, csp, body) = get(path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert_eq!(ct, "text/html; charset=utf-8", "{path}");
        assert!(csp.contains("default-src 'self'"), "{path}: {csp}");
        assert_eq!(body, dgem_studio::INDEX_HTML);
    }
    let (status, ct, _, body) = get("/studio/app.js").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ct, "text/javascript; charset=utf-8");
    assert!(body.contains("/api/decide"));
    let (status, ct, _, body) = get("/studio/kinds.js").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ct, "text/javascript; charset=utf-8");
    assert!(body.contains("export const KINDS"));
    let (status, ct, _, _) = get("/studio/style.css").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ct, "text/css; charset=utf-8");
    let (status, _, _, _) = get("/studio/missing.js").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[test]
fn page_loads_only_same_origin_assets() {
    for (name, text) in [
        ("index.html", dgem_studio::INDEX_HTML),
        ("app.js", dgem_studio::APP_JS),
        ("kinds.js", dgem_studio::KINDS_JS),
        ("style.css", dgem_studio::STYLE_CSS),
    ] {
        for needle in ["http://", "https://", "//cdn", "@import"] {
            assert!(!text.contains(needle), "{name} references `{needle}`");
        }
    }
    let html = dgem_studio::INDEX_HTML;
    assert!(html.contains(r#"<script type="module" src="/studio/app.js">"#));
    assert!(html.contains(r#"href="/studio/style.css""#));
    // Accessibility hooks the page promises: live results, in-place errors.
    assert!(html.contains(r#"id="results""#) && html.contains(r#"aria-live="polite""#));
    assert!(html.contains(r#"id="form-error" class="error" role="alert""#));
    for id in ["template", "backend", "samples", "seed", "state"] {
        assert!(
            html.contains(&format!(r#"for="{id}""#)),
            "no label for #{id}"
        );
    }
}

/// Every question type the validator accepts has a Studio entry (its menu
/// item and its answer widget, in kinds.js), so a new type cannot reach the
/// page without one.
#[test]
fn every_question_type_has_a_studio_widget() {
    for kind in dgem_core::schema::QuestionKind::ALL {
        let entry = format!("\n  {}: {{", kind.as_str());
        assert!(
            dgem_studio::KINDS_JS.contains(&entry),
            "kinds.js has no entry for `{}`",
            kind.as_str()
        );
    }
}
