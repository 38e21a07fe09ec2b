//! Helpers for testing `deploy/` without cloud access (the tests live in
//! `tests/`): run a deploy script in `--dry-run` mode with a clean, fixed
//! environment, and parse a Dockerfile into its instructions.
//!
//! Nothing here talks to Google Cloud; the scripts print the exact `gcloud`
//! and `curl` commands they would run, and the tests snapshot those lines.
#![deny(missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Command;

use thiserror::Error;

/// Running a script or reading a deploy file failed.
#[derive(Debug, Error)]
pub enum DeployTestError {
    /// The file or program could not be read or started.
    #[error("could not run or read `{path}`: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// What a script run produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptRun {
    /// Exit code (-1 when killed by a signal).
    pub code: i32,
    /// Standard output, with the repository root replaced by `[ROOT]`.
    pub stdout: String,
    /// Standard error, with the repository root replaced by `[ROOT]`.
    pub stderr: String,
}

/// Run `bash <repo>/<script> args…` with only `PATH`, `HOME` and `env` set, so
/// the caller's environment (a `TIER`, a `PROJECT`) cannot leak in.
///
/// # Errors
/// [`DeployTestError::Io`] when bash cannot be started.
pub fn run_script(
    script: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<ScriptRun, DeployTestError> {
    let root = repo_root();
    let path = root.join(script);
    let mut cmd = Command::new("bash");
    cmd.arg(&path).args(args).env_clear().current_dir(&root);
    for key in ["PATH", "HOME"] {
        if let Some(v) = std::env::var_os(key) {
            cmd.env(key, v);
        }
    }
    cmd.envs(env.iter().copied());
    let out = cmd
        .output()
        .map_err(|source| DeployTestError::Io { path, source })?;
    let root_s = root.display().to_string();
    let clean = |b: &[u8]| String::from_utf8_lossy(b).replace(&root_s, "[ROOT]");
    Ok(ScriptRun {
        code: out.status.code().unwrap_or(-1),
        stdout: clean(&out.stdout),
        stderr: clean(&out.stderr),
    })
}

/// One Dockerfile instruction: upper-case keyword and its arguments, with
/// continuation lines joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instruction {
    /// `FROM`, `RUN`, `COPY`, …
    pub keyword: String,
    /// Everything after the keyword, trimmed.
    pub args: String,
}

/// Parse Dockerfile text: skips comments (including parser directives) and
/// blank lines, joins lines ending in `\`.
pub fn parse_dockerfile(text: &str) -> Vec<Instruction> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || (t.is_empty() && pending.is_empty()) {
            continue;
        }
        if let Some(head) = t.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        pending.push_str(t);
        let full = std::mem::take(&mut pending);
        let (kw, args) = full
            .split_once(char::is_whitespace)
            .unwrap_or((full.as_str(), ""));
        out.push(Instruction {
            keyword: kw.to_ascii_uppercase(),
            args: args.split_whitespace().collect::<Vec<_>>().join(" "),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_continuations_and_comments() {
        let d = parse_dockerfile("# syntax=docker/dockerfile:1\nARG A=1\nFROM x AS b\nRUN a \\\n    && b\n\n# c\ncopy --from=b /x /y\n");
        let kws: Vec<&str> = d.iter().map(|i| i.keyword.as_str()).collect();
        assert_eq!(kws, ["ARG", "FROM", "RUN", "COPY"]);
        assert_eq!(d[2].args, "a && b");
        assert_eq!(d[3].args, "--from=b /x /y");
    }
}
