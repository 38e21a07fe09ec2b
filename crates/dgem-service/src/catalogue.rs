//! The policy catalogue every surface decides from: a templates folder, then
//! the built-in policies (a missing folder is an empty one), with the
//! variable rules applied the same way everywhere.
//!
//! Variable aliases (the original dgem's): `context` fills `document`, `text`
//! fills `user_input`, and the first non-empty of `input_text`, `ticket`,
//! `document`, `text`, `context` fills `input`. A variable the template does
//! not read (directly or through an alias) is refused, naming the closest
//! one it reads; a request that gives none of the template's state variables
//! is refused unless `allow_missing_vars`.

use dgem_core::payload::Payload;
use dgem_engine::templates::{template_variables, TemplateDir, TemplateSummary};
use serde_json::{Map, Value};

use crate::error::{ServiceError, TemplateFailure};

/// The policy catalogue (see the module docs).
#[derive(Debug, Clone)]
pub struct Catalogue {
    dir: TemplateDir,
    /// A policy given by its text (`dgem decide -t FILE`): `(name, text)`,
    /// found before the folder and the built-ins.
    given: Option<(String, String)>,
}

impl Catalogue {
    /// The catalogue of `dir`'s templates, then the built-in policies.
    pub fn new(dir: TemplateDir) -> Self {
        Self { dir, given: None }
    }

    /// This catalogue with policy `name` given by its `text` (a file the
    /// command line named by path), found ahead of the folder and built-ins.
    #[must_use]
    pub fn with_policy_text(mut self, name: impl Into<String>, text: impl Into<String>) -> Self {
        self.given = Some((name.into(), text.into()));
        self
    }

    /// The text of policy `name`.
    ///
    /// # Errors
    /// What [`TemplateDir::text`] returns when the name does not resolve or
    /// the file cannot be read.
    pub fn text(&self, name: &str) -> Result<String, dgem_engine::templates::TemplateError> {
        match &self.given {
            Some((given, text)) if given == name => Ok(text.clone()),
            _ => self.dir.text(name),
        }
    }

    /// The folder behind the catalogue.
    pub fn dir(&self) -> &TemplateDir {
        &self.dir
    }

    /// Every policy by name, with its questions and variables.
    pub fn list(&self) -> Vec<TemplateSummary> {
        self.dir.list()
    }

    /// Render template `name` for a decision: `vars` checked and aliased as
    /// the module docs say, `samples` (when given) passed to the template as
    /// the variable `samples`, and a variable the template reads with no
    /// default refused unless `allow_missing`.
    ///
    /// # Errors
    /// [`ServiceError::Variables`] for an unknown variable,
    /// [`ServiceError::NoState`] for no state variable;
    /// [`ServiceError::Template`] when the name does not resolve,
    /// the file cannot be read or the template does not render.
    pub fn render(
        &self,
        name: &str,
        vars: Map<String, Value>,
        allow_missing: bool,
        samples: Option<u32>,
    ) -> Result<Payload, ServiceError> {
        self.render_with(name, vars, allow_missing, !allow_missing, samples, false)
            .map(|r| r.payload)
    }

    /// [`Catalogue::render`] for a request that gives `images` (at least one
    /// image) or not. With an image, a policy that reads images
    /// ([`dgem_core::image_state`]) needs none of its text state variables:
    /// the image stands in for them, the ones left unset are dropped from
    /// the state, and [`Rendered::warnings`] says which.
    ///
    /// # Errors
    /// As [`Catalogue::render`]; [`ServiceError::NoState`] names the image
    /// too when the policy reads images.
    pub fn render_for(
        &self,
        name: &str,
        vars: Map<String, Value>,
        allow_missing: bool,
        samples: Option<u32>,
        images: bool,
    ) -> Result<Rendered, ServiceError> {
        self.render_with(name, vars, allow_missing, !allow_missing, samples, images)
    }

    /// [`Catalogue::render`] for showing what a policy renders to (`dgem
    /// render`): the same variable rules, but a request that gives none of
    /// the state variables renders the placeholder text instead of being
    /// refused. A variable read with no default is still refused unless
    /// `allow_missing`.
    ///
    /// # Errors
    /// As [`Catalogue::render`], without [`ServiceError::NoState`].
    pub fn preview(
        &self,
        name: &str,
        vars: Map<String, Value>,
        allow_missing: bool,
    ) -> Result<Payload, ServiceError> {
        self.render_with(name, vars, allow_missing, false, None, false)
            .map(|r| r.payload)
    }

    fn render_with(
        &self,
        name: &str,
        mut vars: Map<String, Value>,
        allow_missing: bool,
        require_state: bool,
        samples: Option<u32>,
        images: bool,
    ) -> Result<Rendered, ServiceError> {
        let text = self.text(name).map_err(|error| {
            ServiceError::Template(Box::new(TemplateFailure {
                name: name.to_string(),
                error,
                missing: Vec::new(),
                declared: Vec::new(),
            }))
        })?;
        let declared = template_variables(&text);
        check_unknown_variables(name, &vars, &declared)?;
        // An alias fills only variables the template reads: a filled `input`
        // the template does not read would be listed as "given" in messages.
        let given: Vec<String> = vars.keys().cloned().collect();
        alias_variables(&mut vars);
        vars.retain(|k, _| given.contains(k) || declared.contains(k));
        if let Some(n) = samples {
            vars.insert("samples".into(), Value::from(n));
        }
        if require_state {
            let unset = dgem_core::vars::unset_state_variables(&vars, &declared);
            let refusal = dgem_core::vars::missing_state_variables(name, &vars, &declared);
            if (images && !unset.is_empty()) || refusal.is_some() {
                // Rendered once with the unset variables as markers: that
                // says whether the policy reads images, and where they land.
                let marked = marked(name, &text, &vars, &unset, allow_missing)
                    .filter(|p| dgem_core::image_state::reads_images(&p.schema, &p.state));
                match (marked, refusal) {
                    // With an image, a policy that reads images leaves its
                    // unset text variables out of the state.
                    (Some(payload), _) if images => {
                        return image_state(name, payload, &unset);
                    }
                    (Some(_), Some(_)) => {
                        return Err(ServiceError::NoState(format!(
                            "template `{name}` reads images and needs its state: give an image (`images`; `--image FILE` on the command line) or at least one of [{}]; without either it would decide on its placeholder text",
                            unset.join(", ")
                        )));
                    }
                    (None, Some(msg)) => return Err(ServiceError::NoState(msg)),
                    _ => {}
                }
            }
        }
        let payload = render_strict(name, &text, &vars, allow_missing, &declared)?;
        Ok(Rendered {
            payload,
            warnings: Vec::new(),
        })
    }
}

/// A policy rendered for a decision, and what the caller must be told of it.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// The schema and state.
    pub payload: Payload,
    /// Plain-words warnings for `diagnostics.warnings` (e.g. the text
    /// variables an image stood in for).
    pub warnings: Vec<String>,
}

/// [`TemplateDir::render_text_strict`] with its failure named for the caller.
fn render_strict(
    name: &str,
    text: &str,
    vars: &Map<String, Value>,
    allow_missing: bool,
    declared: &[String],
) -> Result<Payload, ServiceError> {
    TemplateDir::render_text_strict(name, text, vars, allow_missing).map_err(|error| {
        let missing = declared
            .iter()
            .filter(|v| *v != "samples" && !vars.contains_key(*v))
            .cloned()
            .collect();
        ServiceError::Template(Box::new(TemplateFailure {
            name: name.to_string(),
            error,
            missing,
            declared: declared.to_vec(),
        }))
    })
}

/// The policy rendered with each of `unset` as its numbered marker
/// ([`dgem_core::image_state::marker`]); `None` when the template does not
/// render so (it compares a variable, say).
fn marked(
    name: &str,
    text: &str,
    vars: &Map<String, Value>,
    unset: &[String],
    allow_missing: bool,
) -> Option<Payload> {
    let mut marked = vars.clone();
    for (i, v) in unset.iter().enumerate() {
        marked.insert(v.clone(), Value::String(dgem_core::image_state::marker(i)));
    }
    TemplateDir::render_text_strict(name, text, &marked, allow_missing).ok()
}

/// A request that gives an image to a policy that reads images and leaves
/// its text state variables `unset` (all or some of them), `payload` the
/// policy rendered with their markers: the rule of
/// [`dgem_core::image_state`]: every state entry a marker reaches is
/// dropped and a warning names them; a marker in the questions, or one a
/// helper cut, is refused.
fn image_state(name: &str, payload: Payload, unset: &[String]) -> Result<Rendered, ServiceError> {
    use dgem_core::image_state::{drop_marked, dropped_warning, leftover, markers_in};
    let asked: Vec<&str> = markers_in(&payload.schema, unset.len())
        .into_iter()
        .map(|i| unset[i].as_str())
        .collect();
    if !asked.is_empty() || leftover(&payload.schema) {
        let list = if asked.is_empty() {
            unset.join(", ")
        } else {
            asked.join(", ")
        };
        return Err(ServiceError::NoState(format!(
            "template `{name}`: its questions read [{list}], so an image cannot stand in for them; give them"
        )));
    }
    let (state, dropped) = drop_marked(payload.state, unset.len());
    if leftover(&state) {
        // A helper cut a marker: what is left of it must not reach the model.
        return Err(ServiceError::NoState(format!(
            "template `{name}` needs its state: give at least one of [{}]; its template changes the placeholder of an unset variable, so an image cannot stand in for it",
            unset.join(", ")
        )));
    }
    Ok(Rendered {
        payload: Payload {
            schema: payload.schema,
            state,
        },
        warnings: vec![dropped_warning(unset, &dropped)],
    })
}

/// Names a request variable may be sent as besides its own: `context` fills
/// `document`, `text` fills `user_input`, and `input_text`, `ticket`,
/// `document`, `text`, `context` fill `input`.
fn alias_targets(var: &str) -> &'static [&'static str] {
    match var {
        "context" => &["document", "input"],
        "text" => &["user_input", "input"],
        "input_text" | "ticket" | "document" => &["input"],
        _ => &[],
    }
}

/// Refuse variables the template does not read (directly or through an
/// alias), e.g. a misspelled `tickt` that would otherwise run with an empty
/// ticket.
///
/// # Errors
/// [`ServiceError::Variables`] naming the unknown variable(s), the closest
/// declared name for each, and the template's variables.
pub fn check_unknown_variables(
    name: &str,
    vars: &Map<String, Value>,
    declared: &[String],
) -> Result<(), ServiceError> {
    let reads = |v: &str| declared.iter().any(|d| d == v);
    let unknown: Vec<&str> = vars
        .keys()
        .map(String::as_str)
        .filter(|k| !reads(k) && !alias_targets(k).iter().any(|t| reads(t)))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let detail = dgem_core::vars::unknown_variables(name, unknown.iter().copied(), declared)
        .unwrap_or_else(|| {
            format!(
                "template `{name}` does not read [{}]; its variables are [{}]",
                unknown.join(", "),
                declared.join(", ")
            )
        });
    Err(ServiceError::Variables(detail))
}

/// Fill the aliased variables (see the module docs); a variable given under
/// its own name wins.
pub fn alias_variables(vars: &mut Map<String, Value>) {
    let non_empty = |v: Option<&Value>| v.is_some_and(|v| !v.is_null() && v.as_str() != Some(""));
    if !vars.contains_key("document") {
        if let Some(c) = vars.get("context").cloned() {
            vars.insert("document".into(), c);
        }
    }
    if !vars.contains_key("user_input") {
        if let Some(t) = vars.get("text").cloned() {
            vars.insert("user_input".into(), t);
        }
    }
    if !non_empty(vars.get("input")) {
        let first = ["input_text", "ticket", "document", "text", "context"]
            .iter()
            .find_map(|k| vars.get(*k).filter(|v| non_empty(Some(v))).cloned());
        if let Some(v) = first {
            vars.insert("input".into(), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn aliases() {
        let mut v = Map::new();
        v.insert("context".into(), json!("ctx"));
        v.insert("text".into(), json!("t"));
        alias_variables(&mut v);
        assert_eq!(v["document"], "ctx");
        assert_eq!(v["user_input"], "t");
        assert_eq!(v["input"], "ctx");
    }

    /// Regression: an alias filled `input` for a template that does not read
    /// it, and the refusal of an unset variable then listed `input` among the
    /// variables the caller gave.
    #[test]
    fn an_alias_filled_variable_the_template_does_not_read_is_not_listed_as_given() {
        let dir = std::env::temp_dir().join(format!("dgem-cat-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp folder");
        std::fs::write(
            dir.join("two.json.tmpl"),
            r#"{"schema": {"questions": [{"id": "u", "type": "boolean"}]},
 "state": {"ticket": {{ .ticket | toJson }}, "customer": {{ .customer | toJson }}}}"#,
        )
        .expect("write");
        let cat = Catalogue::new(TemplateDir::new(&dir));
        let mut vars = Map::new();
        vars.insert("ticket".into(), json!("refund me"));
        let err = cat.render("two", vars, false, None).expect_err("unset");
        let text = err.to_string();
        assert!(text.contains("the variables given are [ticket]"), "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_misspelled_variable_is_refused_naming_the_closest() {
        let cat = Catalogue::new(TemplateDir::new("/nonexistent/dgem/templates"));
        let mut vars = Map::new();
        vars.insert("tickt".into(), json!("refund"));
        match cat.render("support_triage", vars, false, None) {
            Err(ServiceError::Variables(detail)) => {
                assert!(detail.contains("tickt"), "{detail}");
                assert!(detail.contains("ticket"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
    }
}
