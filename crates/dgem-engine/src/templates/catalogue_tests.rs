//! Issue 29: one catalogue (the folder first, then the built-in policies) for
//! every surface; a missing or unreadable folder is an empty one.

use super::*;

/// A fresh folder under the system temp folder, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("dgem-catalogue-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp folder");
        Self(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const MINE: &str =
    r#"{"schema": {"questions": [{"id": "mine", "type": "noul"}]}, "state": {"t": "x"}}"#;

#[test]
fn a_missing_folder_serves_the_built_in_policies() {
    let dir = TemplateDir::new("/nonexistent/dgem/templates");
    let mut want: Vec<String> = builtin_names().into_iter().map(str::to_string).collect();
    sort_names(&mut want);
    assert_eq!(dir.names(), want);
    assert!(dir.folder_names().is_empty());
    let list = dir.list();
    assert_eq!(list.len(), want.len());
    let triage = list
        .iter()
        .find(|t| t.name == "support_triage")
        .expect("listed");
    assert!(triage.error.is_empty(), "{}", triage.error);
    assert_eq!(triage.variables, ["samples", "ticket"]);
    assert_eq!(triage.questions[1].id, "team");
    assert_eq!(
        dir.source("support_triage"),
        Ok(TemplateSource::BuiltIn(
            builtin("support_triage").expect("built in")
        ))
    );
    // Built-ins resolve with the suffix and in their subfolder too.
    assert!(dir.text("support_triage.json.tmpl").is_ok());
    assert!(dir.text("bench/intent_select").is_ok());
    let mut vars = Map::new();
    vars.insert("ticket".into(), Value::String("refund please".into()));
    let payload = dir.render("support_triage", &vars).expect("renders");
    assert_eq!(payload.state["ticket"], "refund please");
}

#[test]
fn a_folder_copy_wins_and_the_rest_are_merged() {
    let scratch = Scratch::new("merge");
    std::fs::write(scratch.0.join("support_triage.json.tmpl"), MINE).expect("write");
    std::fs::write(scratch.0.join("mine.json.tmpl"), MINE).expect("write");
    std::fs::create_dir(scratch.0.join("sub")).expect("subfolder");
    std::fs::write(scratch.0.join("sub/deep.json.tmpl"), MINE).expect("write");
    std::fs::create_dir(scratch.0.join(".hidden")).expect("hidden folder");
    std::fs::write(scratch.0.join(".hidden/no.json.tmpl"), MINE).expect("write");
    let dir = TemplateDir::new(&scratch.0);
    assert_eq!(
        dir.folder_names(),
        ["mine", "support_triage", "sub/deep"].map(String::from)
    );
    let names = dir.names();
    assert_eq!(
        names.iter().filter(|n| *n == "support_triage").count(),
        1,
        "{names:?}"
    );
    for n in ["mine", "code_review", "sub/deep", "bench/intent_select"] {
        assert!(names.iter().any(|x| x == n), "{n} in {names:?}");
    }
    // Top-level names first, each group by name.
    let first_sub = names.iter().position(|n| n.contains('/')).expect("a sub");
    assert!(
        names[first_sub..].iter().all(|n| n.contains('/')),
        "{names:?}"
    );
    assert!(matches!(
        dir.source("support_triage"),
        Ok(TemplateSource::Folder(_))
    ));
    assert_eq!(dir.text("support_triage").expect("text"), MINE);
    let list = dir.list();
    let triage = list
        .iter()
        .find(|t| t.name == "support_triage")
        .expect("listed");
    assert_eq!(triage.questions[0].id, "mine");
    // The catalog names templates, never the server's folder.
    let json = serde_json::to_string(&list).expect("json");
    assert!(!json.contains(&*scratch.0.to_string_lossy()), "{json}");
}

#[test]
fn an_unreadable_folder_is_an_empty_one() {
    let scratch = Scratch::new("file");
    let not_a_folder = scratch.0.join("templates");
    std::fs::write(&not_a_folder, "a file").expect("write");
    let dir = TemplateDir::new(&not_a_folder);
    assert_eq!(dir.names().len(), builtin_names().len());
    assert!(dir.text("code_review").is_ok());
}

#[test]
fn a_folder_file_that_leads_out_is_refused_not_replaced_by_the_built_in() {
    let scratch = Scratch::new("symlink");
    let outside = Scratch::new("symlink-outside");
    let secret = outside.0.join("secret.json.tmpl");
    std::fs::write(&secret, MINE).expect("write");
    std::os::unix::fs::symlink(&secret, scratch.0.join("support_triage.json.tmpl"))
        .expect("symlink");
    let dir = TemplateDir::new(&scratch.0);
    let e = dir.text("support_triage").expect_err("leads out");
    assert!(
        e.to_string()
            .contains("resolves outside the templates folder"),
        "{e}"
    );
}

#[test]
fn an_unknown_name_gets_the_closest_known_one() {
    let dir = TemplateDir::new("/nonexistent/dgem/templates");
    let e = dir.source("suport_triage").expect_err("unknown");
    assert_eq!(
        e.with_list_hint("GET /api/templates lists the names"),
        "template: no such template (did you mean `support_triage`?); GET /api/templates lists the names. Given: `suport_triage`"
    );
}
