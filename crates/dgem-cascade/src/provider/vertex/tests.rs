use super::*;

#[test]
fn model_names_are_cleaned() {
    assert_eq!(sanitize_model_with("", None), "gemini-3.8-flash");
    assert_eq!(
        sanitize_model_with("  ", Some("gemini-3.7-flash")),
        "gemini-3.7-flash"
    );
    assert_eq!(
        sanitize_model_with("", Some("gemini-2.0-flash")),
        "gemini-3.8-flash"
    );
    assert_eq!(
        sanitize_model_with("gemini-3.5-flash", None),
        "gemini-3.7-flash"
    );
    assert_eq!(
        sanitize_model_with("Gemini-3.1-Flash-Lite", None),
        "gemini-3.5-flash-lite"
    );
    for old in ["gemini-1.5-pro", "gemini-2.5-flash", "gemini-2"] {
        assert_eq!(sanitize_model_with(old, None), "gemini-3.8-flash", "{old}");
    }
    assert_eq!(
        sanitize_model_with("gemini-3-pro", Some("x")),
        "gemini-3-pro"
    );
}

#[test]
fn fallback_chain_is_deduplicated() {
    assert_eq!(
        model_chain("gemini-3-pro"),
        [
            "gemini-3-pro",
            "gemini-3.8-flash",
            "gemini-3.7-flash",
            "gemini-3.5-flash-lite",
            "gemini-3-flash-preview"
        ]
    );
    assert_eq!(
        model_chain("gemini-3.7-flash"),
        [
            "gemini-3.7-flash",
            "gemini-3.8-flash",
            "gemini-3.5-flash-lite",
            "gemini-3-flash-preview"
        ]
    );
}

#[test]
fn schema_becomes_gemini_subset() {
    let js = json!({
        "type": "object",
        "properties": {
            // A slot named like a keyword stays a property name.
            "type": {
                "type": "object",
                "properties": {
                    "decision": {"type": "string", "enum": ["yes", "no"]},
                    "confidence": {"type": "number"}
                },
                "required": ["decision", "confidence"],
                "additionalProperties": false
            }
        },
        "required": ["type"],
        "additionalProperties": false
    });
    assert_eq!(
        gemini_schema(&js),
        json!({
            "type": "OBJECT",
            "properties": {
                "type": {
                    "type": "OBJECT",
                    "properties": {
                        "decision": {"type": "STRING", "enum": ["yes", "no"]},
                        "confidence": {"type": "NUMBER"}
                    },
                    "required": ["decision", "confidence"]
                }
            },
            "required": ["type"]
        })
    );
}

#[test]
fn image_parts() {
    assert_eq!(
        image_part("data:image/png;base64,iVBORw0KGgo=").expect("data uri"),
        json!({"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}})
    );
    assert_eq!(
        image_part("https://x.test/a/scan.WEBP?sig=1").expect("url"),
        json!({"fileData": {"mimeType": "image/webp", "fileUri": "https://x.test/a/scan.WEBP?sig=1"}})
    );
    assert_eq!(
        image_part("gs://bucket/photo").expect("gs"),
        json!({"fileData": {"mimeType": "image/jpeg", "fileUri": "gs://bucket/photo"}})
    );
    let err = image_part("data:image/png,rawbytes").expect_err("not base64");
    assert_eq!(
        err.to_string(),
        "vertex: `images` must be a base64 data: URI (data:<mime>;base64,<data>); got data:image/png,rawbytes"
    );
    let err = image_part("/tmp/a.png").expect_err("path");
    assert!(err.to_string().ends_with("got /tmp/a.png"), "{err}");
}
