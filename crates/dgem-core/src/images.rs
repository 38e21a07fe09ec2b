//! Image states: a state that is a list of content parts, some of them images.
//!
//! A state holds images when it is a JSON list with at least one part whose
//! `type` is `image_url` or `image` (the OpenAI chat content-part shapes the
//! original structured server forwards to vLLM unchanged). The other parts are
//! text parts, `{"type": "text", "text": …}`.
//!
//! Every image must be inline, as a `data:<type>;base64,<bytes>` URL, so its
//! size and type can be checked here rather than failing upstream:
//! - at most [`MAX_IMAGES`] images per state,
//! - at most [`MAX_IMAGE_BYTES`] decoded bytes each,
//! - a type in [`IMAGE_TYPES`], declared in the URL and matching the bytes'
//!   own signature (read with the `infer` crate).
//!
//! Remote (`http(s)://`) image URLs are refused: the server would have vLLM
//! fetch whatever address a caller names.

use base64::Engine as _;
use serde_json::{json, Value};

use crate::SchemaError;

/// The error field of "this backend cannot read images" and of "this policy
/// needs an image" ([`check_required`]): 422 on every route.
pub const NO_VISION_FIELD: &str = "images";

/// The refusal of an image state by a backend without vision (`runtime`,
/// `model` name it), on field [`NO_VISION_FIELD`]: the embedded engine and
/// the server's routes give this one message.
pub fn no_vision(runtime: &str, model: &str) -> SchemaError {
    SchemaError::new(
        NO_VISION_FIELD,
        format!(
            "images: this backend ({runtime}, model {model}) has no vision and cannot read images; \
             send the state as text or JSON, or decide on a vision backend (`--backend vllm=URL`)"
        ),
    )
}

/// Refuse a decision on a policy that declares `requires_image: true` (it
/// reads an image of the state) when `state` holds no image: the model would
/// answer from the text alone, and nothing would say so. Every decider calls
/// this before reading, so every surface refuses alike; the field is
/// [`NO_VISION_FIELD`] (`images`, what the caller must send), which the HTTP
/// routes answer with 422.
///
/// # Errors
/// [`SchemaError`] on `images`, naming the policy, `requires_image`, and how
/// to give an image on each surface.
pub fn check_required(
    schema: &crate::schema::ValidSchema,
    state: &Value,
) -> Result<(), SchemaError> {
    if !schema.requires_image || has_images(state) {
        return Ok(());
    }
    let policy = schema
        .policy
        .as_deref()
        .map_or_else(|| "this policy".to_string(), |p| format!("policy `{p}`"));
    Err(SchemaError::new(
        NO_VISION_FIELD,
        format!(
            "images: {policy} declares `requires_image: true`, but the state holds no image; \
             give one with `--image FILE` (dgem decide), `images` in the request body (a list \
             of data:image/... URLs: /api/decide, /v1/systemone, MCP), or an image_url part in \
             the chat message, on a backend that reads images (`--backend vllm=URL`)"
        ),
    ))
}

/// Most images one state may carry.
pub const MAX_IMAGES: usize = 16;
/// Largest decoded image, in bytes (10 MiB).
pub const MAX_IMAGE_BYTES: usize = 10 * 1024 * 1024;
/// Image types accepted (what vLLM's multimodal loader decodes).
pub const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/webp", "image/gif"];

/// Whether `part` is an image content part (`type` `image_url` or `image`).
pub fn is_image_part(part: &Value) -> bool {
    matches!(
        part.get("type").and_then(Value::as_str),
        Some("image_url" | "image")
    )
}

/// Whether a state holds images: a list with at least one image part.
pub fn has_images(state: &Value) -> bool {
    state
        .as_array()
        .is_some_and(|parts| parts.iter().any(is_image_part))
}

/// An image state split for a prompt: the non-text parts in order, and the
/// text of the text parts joined with `"\n"` (serving.md's image layout).
#[derive(Debug, Clone, PartialEq)]
pub struct ImageState {
    /// The state's parts in the order sent, rebuilt (images as `image_url`
    /// parts, text as `text` parts, nothing else). Check the state with
    /// [`check_images`] first: parts it would refuse are dropped here.
    pub parts: Vec<Value>,
    /// Every part that is not text, in order.
    pub images: Vec<Value>,
    /// The text parts' `text`, joined with newlines ("" when none).
    pub text: String,
}

impl ImageState {
    /// Split `state` when it holds images; `None` for a text or JSON state.
    /// Call [`check_images`] first.
    pub fn split(state: &Value) -> Option<Self> {
        if !has_images(state) {
            return None;
        }
        let mut parts = Vec::new();
        let mut images = Vec::new();
        let mut texts = Vec::new();
        // Parts are rebuilt, not copied: an image is `{"type": "image_url",
        // "image_url": {"url"}}` whatever form it came in, and no other key of
        // a part travels upstream.
        for p in state.as_array()? {
            if is_image_part(p) {
                let url = part_url(p).unwrap_or_default();
                let image = json!({"type": "image_url", "image_url": {"url": url}});
                images.push(image.clone());
                parts.push(image);
            } else if let Some(t) = p.get("text").and_then(Value::as_str) {
                texts.push(t);
                parts.push(json!({"type": "text", "text": t}));
            }
        }
        Some(Self {
            parts,
            images,
            text: texts.join("\n"),
        })
    }

    /// The parts of one user message: the images, then one text part.
    pub fn parts_with_text(&self, text: String) -> Value {
        let mut parts = self.images.clone();
        parts.push(json!({"type": "text", "text": text}));
        Value::Array(parts)
    }
}

/// Image parts from a request's JSON `images` list (`/v1/systemone`,
/// `/api/decide`, MCP): each entry a `data:image/...` URL string or an object
/// `{"content_type": "image/...", "base64": "..."}`. `null` or absent → none.
///
/// # Errors
/// [`SchemaError`] on `images` (not a list) or `images[i]` (a bad entry).
pub fn parts_from_json(images: Option<&Value>) -> Result<Vec<Value>, SchemaError> {
    let items = match images {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(SchemaError::new(
                "images",
                "images: a list of data:image/... URLs or objects with content_type and base64",
            ))
        }
    };
    let mut parts = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let url = match item {
            Value::String(s) if s.starts_with("data:image/") => s.clone(),
            Value::Object(o) => match (
                o.get("content_type").and_then(Value::as_str),
                o.get("base64").and_then(Value::as_str),
            ) {
                (Some(ct), Some(b64)) if ct.starts_with("image/") => {
                    format!("data:{ct};base64,{b64}")
                }
                _ => return Err(bad_entry(i)),
            },
            _ => return Err(bad_entry(i)),
        };
        parts.push(json!({"type": "image_url", "image_url": {"url": url}}));
    }
    Ok(parts)
}

fn bad_entry(i: usize) -> SchemaError {
    SchemaError::new(
        format!("images[{i}]"),
        format!("images[{i}]: a data:image/... URL or an object with content_type and base64"),
    )
}

/// The decision state for a request's `state` and its separate `images` list
/// (`/v1/systemone`, `/api/decide`, MCP, `dgem decide --image`), every part checked:
/// - a `state` that is itself a list of content parts with images keeps its
///   parts, after the request's images;
/// - any other `state` becomes one text part after the images, unless it is
///   empty ([`crate::state::is_empty`]: an image that stands in for the state,
///   `crate::image_state`), when the images are the whole state;
/// - with no images anywhere, `state` is returned unchanged.
///
/// # Errors
/// [`SchemaError`] naming the part as the caller sent it (`images[i]` or
/// `state[i]`), or `images` when the two lists hold over [`MAX_IMAGES`] in all.
pub fn with_images(state: Value, images: Vec<Value>) -> Result<Value, SchemaError> {
    let mut count = check_parts(&images, "images")?;
    let parts = match state {
        Value::Array(parts) if parts.iter().any(is_image_part) => {
            count += check_parts(&parts, "state")?;
            parts
        }
        other if images.is_empty() => return Ok(other),
        other if crate::state::is_empty(&other) => Vec::new(),
        other => vec![json!({"type": "text", "text": crate::prompt::state_text(&other)})],
    };
    if count > MAX_IMAGES {
        return Err(SchemaError::new(
            "images",
            format!("images: at most {MAX_IMAGES} images in all (`images` and `state` together); got {count}"),
        ));
    }
    let mut all = images;
    all.extend(parts);
    Ok(Value::Array(all))
}

/// The data URLs of a state's image parts, in order (what a Stage-2 provider
/// is sent alongside the prompt). Empty for a text or JSON state.
pub fn image_urls(state: &Value) -> Vec<String> {
    state
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| is_image_part(p))
        .filter_map(|p| part_url(p).map(str::to_owned))
        .collect()
}

/// The data URL of an image part: `image_url.url`, `image_url` as a string,
/// or `image` as a string.
fn part_url(part: &Value) -> Option<&str> {
    match part.get("image_url") {
        Some(Value::Object(o)) => o.get("url").and_then(Value::as_str),
        Some(Value::String(s)) => Some(s),
        _ => part.get("image").and_then(Value::as_str),
    }
}

/// Check every image of `state` (see the module docs). Text and JSON states
/// pass with 0.
///
/// # Errors
/// [`SchemaError`] on field `state[i]` naming what is wrong (too many images,
/// not a data URL, an unsupported or mismatched type, bad base64, too large).
pub fn check_images(state: &Value) -> Result<usize, SchemaError> {
    match state.as_array().filter(|_| has_images(state)) {
        Some(parts) => check_parts(parts, "state"),
        None => Ok(0),
    }
}

/// Check the image parts among `parts`, naming a bad one `<list>[i]` (e.g.
/// `images[2]` for a request's `images` list). Returns how many there are.
///
/// # Errors
/// As [`check_images`].
pub fn check_parts(parts: &[Value], list: &str) -> Result<usize, SchemaError> {
    let mut count = 0;
    for (i, part) in parts.iter().enumerate() {
        let field = format!("{list}[{i}]");
        if !is_image_part(part) {
            // Only text and images go upstream: any other part (a video or
            // audio URL, embeddings) would reach vLLM unchecked.
            match part.get("type").and_then(Value::as_str) {
                Some("text") if part.get("text").is_some_and(Value::is_string) => continue,
                Some("text") => {
                    return Err(SchemaError::new(
                        &field,
                        format!("{field}: a text part needs a string `text`"),
                    ))
                }
                other => {
                    let given = match (other, part.get("type")) {
                        (Some(t), _) => {
                            format!("type `{}`", t.chars().take(40).collect::<String>())
                        }
                        (None, None | Some(Value::Null)) => "no `type`".to_owned(),
                        (None, Some(v)) => format!(
                            "type {}",
                            v.to_string().chars().take(40).collect::<String>()
                        ),
                    };
                    return Err(SchemaError::new(
                        &field,
                        format!("{field}: a part must be `text` or an image (`image_url`, `image`). Given: {given}"),
                    ));
                }
            }
        }
        count += 1;
        if count > MAX_IMAGES {
            return Err(SchemaError::new(
                &field,
                format!("{field}: at most {MAX_IMAGES} images per state"),
            ));
        }
        let url = part_url(part).ok_or_else(|| {
            SchemaError::new(
                &field,
                format!("{field}: an image part needs `image_url.url` holding a data:image/...;base64 URL"),
            )
        })?;
        decode_data_url(url).map_err(|why| SchemaError::new(&field, format!("{field}: {why}")))?;
    }
    Ok(count)
}

/// Decode and check one `data:` URL; the bytes' type on success.
fn decode_data_url(url: &str) -> Result<&'static str, String> {
    if url.starts_with("http://") || url.starts_with("https://") {
        return Err("remote image URLs are not fetched; send the image inline as a data:image/...;base64 URL".into());
    }
    let rest = url
        .strip_prefix("data:")
        .ok_or("an image must be a data:image/...;base64 URL")?;
    let (header, payload) = rest
        .split_once(',')
        .ok_or("a data URL needs a comma before its payload")?;
    let declared = header
        .strip_suffix(";base64")
        .ok_or("a data URL must be base64 (`data:image/png;base64,…`)")?;
    if !IMAGE_TYPES.contains(&declared) {
        return Err(format!(
            "image type must be one of [{}]. Given: `{}`",
            IMAGE_TYPES.join(", "),
            declared.chars().take(40).collect::<String>()
        ));
    }
    // A decoded image of MAX_IMAGE_BYTES is 4/3 as long in base64.
    if payload.len() > MAX_IMAGE_BYTES / 3 * 4 + 4 {
        return Err(format!(
            "an image may be at most {} MiB",
            MAX_IMAGE_BYTES >> 20
        ));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(payload.trim())
        .map_err(|e| format!("the base64 payload does not decode ({e})"))?;
    check_bytes(&bytes, Some(declared))
}

/// Check decoded image bytes: size, and a signature of a type in
/// [`IMAGE_TYPES`] (equal to `declared` when given). The type on success.
fn check_bytes(bytes: &[u8], declared: Option<&str>) -> Result<&'static str, String> {
    if bytes.len() > MAX_IMAGE_BYTES {
        return Err(format!(
            "an image may be at most {} MiB",
            MAX_IMAGE_BYTES >> 20
        ));
    }
    let sniffed = infer::get(bytes).map(|t| t.mime_type());
    let Some(found) = sniffed.and_then(|m| IMAGE_TYPES.iter().copied().find(|t| *t == m)) else {
        return Err(format!(
            "the bytes are not a supported image ({}){}",
            IMAGE_TYPES.join(", "),
            sniffed.map_or_else(String::new, |m| format!("; they look like {m}"))
        ));
    };
    if let Some(d) = declared.filter(|d| *d != found) {
        return Err(format!("declared {d}, but the bytes are {found}"));
    }
    Ok(found)
}

/// An image content part from a file's bytes, for `dgem decide --image`:
/// `{"type": "image_url", "image_url": {"url": "data:<type>;base64,…"}}`,
/// the type read from the bytes' signature.
///
/// # Errors
/// [`SchemaError`] on field `image` naming `name` when the bytes are not a
/// supported image or are too large.
pub fn image_part(bytes: &[u8], name: &str) -> Result<Value, SchemaError> {
    let ty = check_bytes(bytes, None)
        .map_err(|why| SchemaError::new("image", format!("image {name}: {why}")))?;
    let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
    Ok(json!({"type": "image_url", "image_url": {"url": format!("data:{ty};base64,{b64}")}}))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest valid PNG: signature + IHDR + IDAT + IEND of a 1×1 pixel.
    pub(crate) const PNG_1X1: &[u8] = &[
        0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44,
        0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F,
        0x15, 0xC4, 0x89, 0x00, 0x00, 0x00, 0x0A, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9C, 0x63, 0x00,
        0x01, 0x00, 0x00, 0x05, 0x00, 0x01, 0x0D, 0x0A, 0x2D, 0xB4, 0x00, 0x00, 0x00, 0x00, 0x49,
        0x45, 0x4E, 0x44, 0xAE, 0x42, 0x60, 0x82,
    ];

    fn state_with(url: &str) -> Value {
        json!([{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "a"}])
    }

    fn err(state: &Value) -> String {
        check_images(state)
            .err()
            .map(|e| e.message)
            .unwrap_or_default()
    }

    #[test]
    fn a_png_part_passes_and_splits_into_images_then_text() {
        let part = image_part(PNG_1X1, "dot.png").unwrap_or_default();
        let url = part["image_url"]["url"].as_str().unwrap_or_default();
        assert!(url.starts_with("data:image/png;base64,iVBORw0KGgo"));
        let state = json!([part, {"type": "text", "text": "one"}, {"type": "text", "text": "two"}]);
        assert_eq!(check_images(&state).ok(), Some(1));
        let split = ImageState::split(&state).unwrap_or_else(|| unreachable!());
        assert_eq!(split.images.len(), 1);
        assert_eq!(split.text, "one\ntwo");
        let parts = split.parts_with_text("T".into());
        assert_eq!(parts[1], json!({"type": "text", "text": "T"}));
        assert!(ImageState::split(&json!("plain text")).is_none());
        assert_eq!(check_images(&json!({"a": 1})).ok(), Some(0));
    }

    /// Regression (hostile run): with one valid image present, any other part
    /// (a `video_url` to an internal address, `image_embeds`) and any extra key
    /// went to vLLM verbatim, and a text part without a string `text` was dropped.
    #[test]
    fn only_text_and_rebuilt_image_parts_go_upstream() {
        let png = image_part(PNG_1X1, "dot.png").unwrap_or_default();
        let url = png["image_url"]["url"].clone();
        for (extra, needle) in [
            (
                json!({"type": "video_url", "video_url": {"url": "http://169.254.169.254/"}}),
                "state[1]: a part must be `text` or an image",
            ),
            (
                json!({"type": "image_embeds", "image_embeds": "AAAA"}),
                "Given: type `image_embeds`",
            ),
            (json!({"image_url": {"url": "x"}}), "Given: no `type`"),
            (
                json!({"type": "text", "text": {"a": 1}}),
                "state[1]: a text part needs a string `text`",
            ),
            (json!({"type": "text"}), "a text part needs a string `text`"),
        ] {
            let state = json!([png.clone(), extra]);
            let msg = check_images(&state)
                .err()
                .map(|e| e.message)
                .unwrap_or_default();
            assert!(msg.contains(needle), "{msg}");
        }
        // Extra keys and the other image forms are rebuilt as plain image_url parts.
        let state = json!([
            {"type": "image_url", "image_url": {"url": url, "uuid": "u"}, "video_url": {"url": "http://evil/"}},
            {"type": "image", "image": url},
            {"type": "image_url", "image_url": url},
            {"type": "text", "text": "t", "foo": 1},
        ]);
        assert_eq!(check_images(&state).ok(), Some(3));
        let split = ImageState::split(&state).unwrap_or_else(|| unreachable!());
        let want = json!({"type": "image_url", "image_url": {"url": url}});
        assert_eq!(split.images, vec![want.clone(), want.clone(), want.clone()]);
        assert_eq!(split.parts[3], json!({"type": "text", "text": "t"}));
    }

    /// Regression (hostile run): a parts `state` beside an `images` list was
    /// written as JSON text, skipping its checks, and errors counted the
    /// merged list (`state[2]` for the caller's `state[0]`).
    #[test]
    fn a_parts_state_beside_images_keeps_its_parts_and_its_own_indices() {
        let png = image_part(PNG_1X1, "dot.png").unwrap_or_default();
        let remote = json!({"type": "image_url", "image_url": {"url": "http://169.254.169.254/"}});
        let err = with_images(json!([remote]), vec![png.clone(), png.clone()]).err();
        assert_eq!(err.map(|e| e.field).as_deref(), Some("state[0]"));
        let merged = with_images(
            json!([png.clone(), {"type": "text", "text": "t"}]),
            vec![png.clone()],
        )
        .unwrap_or_default();
        assert_eq!(
            merged.as_array().map(Vec::len),
            Some(3),
            "images, then the state's parts"
        );
        let text = with_images(json!({"a": 1}), vec![png.clone()]).unwrap_or_default();
        assert_eq!(text[1], json!({"type": "text", "text": "{\"a\": 1}"}));
        assert_eq!(
            with_images(json!("plain"), vec![]).ok(),
            Some(json!("plain"))
        );
        let many: Vec<Value> = (0..10).map(|_| png.clone()).collect();
        let err = with_images(Value::Array(many.clone()), many)
            .err()
            .map(|e| e.message);
        assert!(err.unwrap_or_default().contains("at most 16 images in all"));
    }

    #[test]
    fn bad_images_are_refused_naming_the_part_and_the_rule() {
        let b64 = base64::engine::general_purpose::STANDARD.encode(PNG_1X1);
        assert!(
            err(&state_with("https://example.com/cat.png")).contains("state[0]: remote image URLs")
        );
        assert!(err(&state_with("cat.png")).contains("data:image/...;base64 URL"));
        assert_eq!(
            err(&state_with(&format!("data:image/tiff;base64,{b64}"))),
            "state[0]: image type must be one of [image/png, image/jpeg, image/webp, image/gif]. Given: `image/tiff`"
        );
        assert_eq!(
            err(&state_with(&format!("data:image/jpeg;base64,{b64}"))),
            "state[0]: declared image/jpeg, but the bytes are image/png"
        );
        assert!(err(&state_with("data:image/png;base64,@@@")).contains("does not decode"));
        assert!(err(&state_with("data:image/png;base64,aGVsbG8="))
            .contains("are not a supported image (image/png"));
        let huge = "A".repeat(MAX_IMAGE_BYTES / 3 * 4 + 8);
        assert!(
            err(&state_with(&format!("data:image/png;base64,{huge}"))).contains("at most 10 MiB")
        );
        assert!(err(&json!([{"type": "image_url"}])).contains("needs `image_url.url`"));
        let many: Vec<Value> = (0..=MAX_IMAGES)
            .map(|_| json!({"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{b64}")}}))
            .collect();
        assert_eq!(
            err(&Value::Array(many)),
            "state[16]: at most 16 images per state"
        );
        assert!(image_part(b"not an image", "notes.txt")
            .err()
            .is_some_and(|e| e
                .message
                .starts_with("image notes.txt: the bytes are not a supported image")));
    }
}

#[cfg(test)]
mod required_tests {
    use super::*;
    use crate::schema::{SchemaDefaults, ValidSchema};

    fn schema(requires_image: bool) -> ValidSchema {
        let raw = json!({"requires_image": requires_image,
                         "questions": [{"id": "damaged", "type": "boolean"}]});
        ValidSchema::from_value(&raw, &SchemaDefaults::default()).expect("valid")
    }

    #[test]
    fn a_policy_that_requires_an_image_refuses_a_state_without_one() {
        let text = json!("the parcel arrived");
        let e =
            check_required(&schema(true).with_policy("parcel_photo"), &text).expect_err("no image");
        assert_eq!(e.field, "images");
        assert!(
            e.message.starts_with(
                "images: policy `parcel_photo` declares `requires_image: true`, but the state holds no image; give one with `--image FILE`"
            ),
            "{}",
            e.message
        );
        assert!(
            e.message.contains("`images` in the request body"),
            "{}",
            e.message
        );
        // A text part alone is no image either.
        let parts = json!([{"type": "text", "text": "the parcel"}]);
        assert!(check_required(&schema(true), &parts).is_err());
        // With an image, or without the declaration, it passes.
        let with = json!([{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
                          {"type": "text", "text": "the parcel"}]);
        assert_eq!(check_required(&schema(true), &with), Ok(()));
        assert_eq!(check_required(&schema(false), &text), Ok(()));
    }
}
