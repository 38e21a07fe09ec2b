//! Token sources against a fake metadata server and a fake OAuth2 token
//! endpoint (axum on 127.0.0.1:0): order, caching, the signed service-account
//! JWT, identity audiences, and a Cloud Run target that gets the id token.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::Uri;
use axum::routing::{get, post};
use axum::{Json, Router};
use dgem_gateway::auth::{
    AuthConfig, BearerSource, TokenKind, TokenProvider, CLOUD_PLATFORM_SCOPE,
};
use dgem_gateway::{RemoteConfig, RemoteDgem};
use serde_json::{json, Value};

#[derive(Clone, Default)]
struct Fake {
    hits: Arc<AtomicU32>,
    seen: Arc<Mutex<Vec<String>>>,
}

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn metadata(fake: Fake) -> Router {
    async fn token(State(f): State<Fake>, h: HeaderMap) -> Json<Value> {
        assert_eq!(h.get("metadata-flavor").unwrap(), "Google");
        f.hits.fetch_add(1, Ordering::SeqCst);
        Json(
            json!({"access_token": format!("meta-access-{}", f.hits.load(Ordering::SeqCst)), "expires_in": 3599, "token_type": "Bearer"}),
        )
    }
    async fn identity(State(f): State<Fake>, uri: Uri) -> String {
        f.hits.fetch_add(1, Ordering::SeqCst);
        let query = uri.query().unwrap();
        let raw = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("audience="))
            .unwrap();
        assert!(query.contains("format=full"));
        let aud = raw.replace("%3A", ":").replace("%2F", "/");
        f.seen.lock().unwrap().push(aud.clone());
        format!("meta-id-for-{aud}")
    }
    Router::new()
        .route(
            "/computeMetadata/v1/instance/service-accounts/default/token",
            get(token),
        )
        .route(
            "/computeMetadata/v1/instance/service-accounts/default/identity",
            get(identity),
        )
        .with_state(fake)
}

fn token_endpoint(fake: Fake) -> Router {
    async fn exchange(State(f): State<Fake>, body: String) -> Json<Value> {
        f.hits.fetch_add(1, Ordering::SeqCst);
        let (grant, assertion) = body.split_once("&assertion=").unwrap();
        assert_eq!(
            grant,
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer"
        );
        // Verify the RS256 signature with the key's public half.
        let public = include_bytes!("fixtures/test_sa_key.pub.pem");
        let key = jsonwebtoken::DecodingKey::from_rsa_pem(public).unwrap();
        let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
        v.validate_aud = false;
        let claims: Value = jsonwebtoken::decode(assertion, &key, &v).unwrap().claims;
        f.seen.lock().unwrap().push(claims.to_string());
        if let Some(aud) = claims.get("target_audience") {
            Json(json!({"id_token": format!("sa-id-for-{}", aud.as_str().unwrap())}))
        } else {
            Json(json!({"access_token": "sa-access", "expires_in": 3600}))
        }
    }
    Router::new()
        .route("/token", post(exchange))
        .with_state(fake)
}

fn key_file(dir: &tempfile::TempDir, token_uri: &str) -> std::path::PathBuf {
    let path = dir.path().join("sa.json");
    let key = json!({"type": "service_account", "client_email": "gw@proj.iam.gserviceaccount.com",
        "private_key": include_str!("fixtures/test_sa_key.pem"), "token_uri": token_uri});
    std::fs::write(&path, key.to_string()).unwrap();
    path
}

#[tokio::test]
async fn explicit_token_wins() {
    let fake = Fake::default();
    let meta = serve(metadata(fake.clone())).await;
    let p = TokenProvider::new(
        TokenKind::Access,
        AuthConfig {
            explicit: Some("Bearer ya29.env".into()),
            metadata_base: Some(meta),
            key_file: None,
            gcloud: false,
        },
    );
    assert_eq!(p.bearer().await.unwrap(), "ya29.env");
    assert_eq!(fake.hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn metadata_access_token_is_cached() {
    let fake = Fake::default();
    let meta = serve(metadata(fake.clone())).await;
    let p = TokenProvider::new(
        TokenKind::Access,
        AuthConfig {
            metadata_base: Some(meta),
            ..AuthConfig::default()
        },
    );
    assert_eq!(p.bearer().await.unwrap(), "meta-access-1");
    assert_eq!(
        p.bearer().await.unwrap(),
        "meta-access-1",
        "cached until shortly before expiry"
    );
    assert_eq!(fake.hits.load(Ordering::SeqCst), 1);
    let p = TokenProvider::new(
        TokenKind::Identity {
            audience: "https://svc.a.run.app".into(),
        },
        AuthConfig {
            metadata_base: Some(serve(metadata(fake.clone())).await),
            ..AuthConfig::default()
        },
    );
    assert_eq!(
        p.bearer().await.unwrap(),
        "meta-id-for-https://svc.a.run.app"
    );
}

#[tokio::test]
async fn key_file_signs_a_jwt_when_metadata_is_absent() {
    let fake = Fake::default();
    let token = serve(token_endpoint(fake.clone())).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = AuthConfig {
        // Nothing listens here: the metadata source fails and the key file is next.
        metadata_base: Some("http://127.0.0.1:9".into()),
        key_file: Some(key_file(&dir, &format!("{token}/token"))),
        ..AuthConfig::default()
    };
    let p = TokenProvider::new(TokenKind::Access, cfg.clone());
    assert_eq!(p.bearer().await.unwrap(), "sa-access");
    let claims: Value = serde_json::from_str(&fake.seen.lock().unwrap()[0]).unwrap();
    assert_eq!(claims["iss"], "gw@proj.iam.gserviceaccount.com");
    assert_eq!(claims["scope"], CLOUD_PLATFORM_SCOPE);
    assert_eq!(claims["aud"], format!("{token}/token"));
    assert_eq!(
        claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(),
        3600
    );
    let p = TokenProvider::new(
        TokenKind::Identity {
            audience: "https://svc.a.run.app".into(),
        },
        cfg,
    );
    assert_eq!(p.bearer().await.unwrap(), "sa-id-for-https://svc.a.run.app");
}

#[tokio::test]
async fn every_source_failing_names_each_without_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = AuthConfig {
        metadata_base: Some("http://127.0.0.1:9".into()),
        key_file: Some(key_file(&dir, "http://127.0.0.1:9/token")),
        ..AuthConfig::default()
    };
    let err = TokenProvider::new(TokenKind::Access, cfg)
        .bearer()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("metadata server: unreachable"), "{err}");
    assert!(err.contains("token endpoint unreachable"), "{err}");
    assert!(!err.contains("PRIVATE KEY"), "{err}");
}

#[tokio::test]
async fn cloud_run_target_sends_the_identity_token() {
    let fake = Fake::default();
    let meta = serve(metadata(fake.clone())).await;
    async fn health(h: HeaderMap) -> Json<Value> {
        let auth = h
            .get("authorization")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        Json(
            json!({"status": "ok", "phase": if auth.starts_with("Bearer meta-id-for-http://127.0.0.1") { "ready" } else { "unauthorized" }}),
        )
    }
    let svc = serve(Router::new().route("/health", get(health))).await;
    let provider = TokenProvider::new(
        TokenKind::Identity {
            audience: dgem_gateway::auth::audience_of(&svc),
        },
        AuthConfig {
            metadata_base: Some(meta),
            ..AuthConfig::default()
        },
    );
    let mut cfg = RemoteConfig::new(&format!("{svc}/v1"));
    cfg.auth = Some(Arc::new(provider));
    let t = RemoteDgem::new(cfg).unwrap();
    let h = t.probe().await;
    assert!(h.is_ready(), "{h:?}");
    assert_eq!(*fake.seen.lock().unwrap(), vec![svc]);
}
