//! `dgem templates list | show | init`, and where `-t NAME` finds a policy.
//!
//! A `-t` value is read as a file path when it names a file; otherwise it is a
//! name of the policy catalogue every surface serves
//! ([`dgem_engine::templates::TemplateDir`]): the templates folder
//! (`DGEM_TEMPLATES`, else `templates/` in the working directory) first, then
//! the policies built into the binary, so the shipped policies work from any
//! folder and a user's copy wins over them. A name found nowhere gets the
//! closest known name as a suggestion.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Args, Subcommand};
use dgem_engine::builtin::builtin_names;
use dgem_engine::templates::{leading_comment, TemplateDir, TemplateError, TemplateSource};
use serde_json::json;

use crate::failure::{internal, user, Failure};

/// A policy template found for a `-t` value.
#[derive(Debug, Clone)]
pub struct Found {
    /// Name used in messages (the path given, or the catalogue name).
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

/// Refuse a `DGEM_TEMPLATES` that names no folder: listing or finding
/// policies would otherwise fall back to the built-ins in silence, and a user
/// would edit files nobody reads.
///
/// # Errors
/// A user [`Failure`] naming the variable and the value given.
pub fn check_folder() -> Result<(), Failure> {
    let Some(given) = std::env::var_os("DGEM_TEMPLATES").filter(|v| !v.is_empty()) else {
        return Ok(());
    };
    let path = PathBuf::from(&given);
    if path.is_dir() {
        return Ok(());
    }
    let why = if path.exists() {
        "is not a folder"
    } else {
        "does not exist"
    };
    Err(user(anyhow::anyhow!(
        "`DGEM_TEMPLATES` must name a folder of .json.tmpl policies. Given: `{}`, which {why} (unset it to use `templates/` and the built-in policies)",
        path.display()
    )))
}

/// The policy catalogue of the CLI: [`folder`], then the built-ins.
pub fn catalogue() -> TemplateDir {
    TemplateDir::new(folder())
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
    let trimmed = name.trim();
    if t.is_absolute()
        || trimmed.starts_with('/')
        || trimmed.starts_with("./")
        || trimmed.starts_with("../")
    {
        // Written as a path, so read as one: "not an absolute path" would
        // blame the wrong thing (issue 38).
        let why = if t.exists() {
            "is not a file"
        } else {
            "does not exist"
        };
        return Err(user(anyhow::anyhow!(
            "`--template` must be a .json.tmpl file or a template name. Given: `{name}`, a path that {why}"
        )));
    }
    check_folder()?;
    let catalogue = catalogue();
    let stem = name.trim();
    let stem = stem.strip_suffix(".json.tmpl").unwrap_or(stem).to_string();
    match catalogue.source(&name) {
        Ok(TemplateSource::BuiltIn(text)) => Ok(Found {
            name: stem,
            text: text.to_string(),
            origin: "built-in".to_string(),
        }),
        Ok(TemplateSource::Folder(_)) => {
            let text = catalogue
                .text(&name)
                .map_err(|e| user(anyhow::anyhow!("`--template`: {e}")))?;
            Ok(Found {
                origin: shown_path(&catalogue, &stem),
                name: stem,
                text,
            })
        }
        Err(TemplateError::Name { listable: true, .. }) => {
            let names = catalogue.names();
            let hint = dgem_engine::builtin::closest(&stem, names.iter().map(String::as_str))
                .map(|c| format!(" Did you mean `{c}`?"))
                .unwrap_or_default();
            Err(user(anyhow::anyhow!(
                "`--template` must be a .json.tmpl file or a template name: looked in {} and the built-in policies ([{}]). Given: `{name}`.{hint} (`dgem templates list` shows them all)",
                catalogue.root().display(),
                builtin_names().join(", ")
            )))
        }
        Err(e) => Err(user(anyhow::anyhow!("`--template`: {e}"))),
    }
}

/// Where the folder's template `name` is, as the user would write it.
fn shown_path(catalogue: &TemplateDir, name: &str) -> String {
    catalogue
        .root()
        .join(format!("{name}.json.tmpl"))
        .display()
        .to_string()
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
        TemplatesCommand::List(a) => {
            check_folder()?;
            list(a.json)
        }
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
    let catalogue = catalogue();
    let mut rows: Vec<(String, String, String, Vec<String>)> = Vec::new();
    for name in catalogue.names() {
        let origin = match catalogue.source(&name) {
            Ok(TemplateSource::BuiltIn(_)) => "built-in".to_string(),
            _ => shown_path(&catalogue, &name),
        };
        let text = catalogue.text(&name).unwrap_or_default();
        rows.push((
            name,
            origin,
            leading_comment(&text),
            dgem_core::template::template_variables(&text),
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
    multi       any of "options" (each gets its own probability; "min", "max", "threshold")
    none_of_these: true on a choice or multi adds a real "none" option
  rules         rules between answers, e.g. [{"if": {"category": "problem"}, "then": {"needs_action": "yes"}}]
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
      },
      {
        "id": "topics",
        "type": "multi",
        "instructions": "Which of these does the input mention?",
        "options": ["money", "access", "a deadline"],
        "none_of_these": true
      }
    ],
    "rules": [{"if": {"category": "problem"}, "then": {"needs_action": "yes"}}]
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
