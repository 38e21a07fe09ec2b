//! `dgem templates list | show | init`, and where `-t NAME` finds a policy.
//!
//! A name is looked up, in order, as a file path, in the templates folder
//! (`DGEM_TEMPLATES`, else `templates/` in the working directory), then among
//! the policies built into the binary ([`dgem_engine::builtin`]), so the
//! shipped policies work from any folder and a user's copy wins over them. A
//! name found nowhere gets the closest known name as a suggestion.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Args, Subcommand};
use dgem_engine::builtin::{builtin, builtin_names, closest, BUILTIN};
use dgem_engine::templates::leading_comment;
use serde_json::json;

use crate::failure::{internal, user, Failure};

/// A policy template found for a `-t` value.
#[derive(Debug, Clone)]
pub struct Found {
    /// Name used in messages (the path, or the built-in name).
    pub name: String,
    /// The template text.
    pub text: String,
    /// Where it came from: a path, or `built-in`.
    pub origin: String,
}

/// The templates folder searched before the built-ins.
pub fn folder() -> PathBuf {
    std::env::var_os("DGEM_TEMPLATES")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("templates"), PathBuf::from)
}

fn read(path: &Path) -> Result<Found, Failure> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read template {}", path.display()))
        .map_err(user)?;
    Ok(Found {
        name: path.display().to_string(),
        text,
        origin: path.display().to_string(),
    })
}

/// Names of the `.json.tmpl` files directly in `dir` and one folder down.
fn folder_names(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    let mut walk = |d: &Path, prefix: &str| {
        let Ok(entries) = std::fs::read_dir(d) else {
            return Vec::new();
        };
        let mut subdirs = Vec::new();
        for e in entries.flatten() {
            let p = e.path();
            let Some(file) = p.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if p.is_dir() {
                subdirs.push(file.to_string());
            } else if let Some(stem) = file.strip_suffix(".json.tmpl") {
                names.push(format!("{prefix}{stem}"));
            }
        }
        subdirs
    };
    for sub in walk(dir, "") {
        walk(&dir.join(&sub), &format!("{sub}/"));
    }
    names.sort();
    names
}

/// Find the template for `-t value`.
///
/// # Errors
/// Exit code 1 naming `--template`, where it looked, and the closest known
/// name when there is one.
pub fn find(t: &Path) -> Result<Found, Failure> {
    if t.is_file() {
        return read(t);
    }
    let name = t.to_string_lossy();
    let dir = folder();
    let stem = name.strip_suffix(".json.tmpl").unwrap_or(&name);
    for candidate in [
        dir.join(format!("{stem}.json.tmpl")),
        dir.join(name.as_ref()),
    ] {
        if candidate.is_file() {
            return read(&candidate);
        }
    }
    if let Some(text) = builtin(stem) {
        return Ok(Found {
            name: stem.to_string(),
            text: text.to_string(),
            origin: "built-in".to_string(),
        });
    }
    let mut known = folder_names(&dir);
    known.extend(builtin_names().into_iter().map(str::to_string));
    known.sort();
    known.dedup();
    let hint = closest(stem, known.iter().map(String::as_str))
        .map(|c| format!(" Did you mean `{c}`?"))
        .unwrap_or_default();
    Err(user(anyhow::anyhow!(
        "`--template` must be a .json.tmpl file or a template name: looked in {} and the built-in policies ([{}]). Given: `{name}`.{hint} (`dgem templates list` shows them all)",
        dir.display(),
        builtin_names().join(", ")
    )))
}

/// `dgem templates …`.
#[derive(Debug, Subcommand)]
pub enum TemplatesCommand {
    /// List the policies: the templates folder's, then the built-in ones.
    List(ListArgs),
    /// Print a policy template's text.
    Show {
        /// Template name or path.
        name: PathBuf,
    },
    /// Write a commented starter policy to `DIR/NAME.json.tmpl`.
    Init(InitArgs),
}

/// Arguments of `dgem templates list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `dgem templates init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Name of the new policy: lowercase letters, digits and `_`.
    pub name: String,
    /// Folder to write it in (default: the templates folder, `templates/`).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Overwrite an existing file.
    #[arg(long)]
    pub force: bool,
}

/// Run `dgem templates …`.
pub fn run(cmd: TemplatesCommand) -> Result<(), Failure> {
    match cmd {
        TemplatesCommand::List(a) => list(a.json),
        TemplatesCommand::Show { name } => {
            let found = find(&name)?;
            eprintln!("# {} ({})", found.name, found.origin);
            print!("{}", found.text);
            Ok(())
        }
        TemplatesCommand::Init(a) => init(&a),
    }
}

fn list(as_json: bool) -> Result<(), Failure> {
    let dir = folder();
    let mut rows: Vec<(String, String, String, Vec<String>)> = Vec::new();
    for name in folder_names(&dir) {
        let path = dir.join(format!("{name}.json.tmpl"));
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        rows.push((
            name,
            path.display().to_string(),
            leading_comment(&text),
            dgem_core::template::template_variables(&text),
        ));
    }
    for (name, text) in BUILTIN {
        if rows.iter().any(|r| r.0 == *name) {
            continue;
        }
        rows.push((
            (*name).to_string(),
            "built-in".to_string(),
            leading_comment(text),
            dgem_core::template::template_variables(text),
        ));
    }
    if as_json {
        let list: Vec<_> = rows
            .iter()
            .map(|(n, o, d, v)| json!({"name": n, "origin": o, "description": d, "variables": v}))
            .collect();
        let text = serde_json::to_string_pretty(&list).map_err(internal)?;
        println!("{text}");
        return Ok(());
    }
    for (name, origin, description, vars) in &rows {
        let short: String = description.chars().take(90).collect();
        let more = if short.len() < description.len() {
            "…"
        } else {
            ""
        };
        println!("{name:<24} {origin}");
        println!("    variables: [{}]", vars.join(", "));
        if !short.is_empty() {
            println!("    {short}{more}");
        }
    }
    Ok(())
}

/// A starter policy: every question type, with comments on each key. The
/// template comment is removed when it renders, so the output is plain JSON.
pub const STARTER: &str = r#"{{- /* NAME: a starter policy. Variables: text (the input to decide on), samples (optional, default 1).
Keys of "schema":
  instructions  the rubric every question is read under (plain words, no answer hints)
  questions     up to 64; each has an id (no spaces or ':'), a type and instructions
    boolean     answers yes / no
    choice      one of "options" (2 to 26 names, or {"name", "description"} objects)
    score       one of "levels", an ordered scale from least to most
  samples       reads to average (1-32, or "auto"); more reads give agreement and stderr
  temperature   post-hoc temperature, a number or {"choice": 1.3, ...} (docs/cascade.md)
  abstain_above withhold answers whose hesitation (entropy / ln K) is at or above this
Try it: dgem decide -t NAME -v text="..."   Check it: dgem render -t NAME -v text="..." */ -}}
{
  "schema": {
    "instructions": "Read the input and answer each question from what it says. If it does not say, choose the most cautious answer.",
    "samples": {{ default 1 .samples }},
    "questions": [
      {
        "id": "needs_action",
        "type": "boolean",
        "instructions": "Does the input ask for something to be done?"
      },
      {
        "id": "category",
        "type": "choice",
        "instructions": "Which kind of request is it?",
        "options": [
          {"name": "question", "description": "asks for information"},
          {"name": "problem", "description": "reports something broken"},
          {"name": "request", "description": "asks for a change or a new thing"}
        ]
      },
      {
        "id": "priority",
        "type": "score",
        "instructions": "How soon should someone look at it?",
        "levels": ["whenever", "this_week", "today", "now"]
      }
    ]
  },
  "state": {
    "text": {{ default "No input was provided." .text | toJson }}
  }
}
"#;

fn init(a: &InitArgs) -> Result<(), Failure> {
    let ok = !a.name.is_empty()
        && a.name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !ok {
        return Err(user(anyhow::anyhow!(
            "`NAME` must be lowercase letters, digits and `_` (it becomes the file name and the template id). Given: `{}`",
            a.name
        )));
    }
    let dir = a.dir.clone().unwrap_or_else(folder);
    let path = dir.join(format!("{}.json.tmpl", a.name));
    if path.exists() && !a.force {
        return Err(user(anyhow::anyhow!(
            "{} already exists; pass `--force` to overwrite it, or pick another NAME",
            path.display()
        )));
    }
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create {}", dir.display()))
        .map_err(user)?;
    std::fs::write(&path, STARTER.replace("NAME", &a.name))
        .with_context(|| format!("cannot write {}", path.display()))
        .map_err(user)?;
    println!(
        "wrote {}\ntry it: dgem decide -t {} -v text=\"...\"",
        path.display(),
        path.display()
    );
    Ok(())
}
