//! Records which commit this build was made from, so that a receipt names the
//! binary's commit rather than whatever the working directory holds when the
//! benchmark runs.
//!
//! Sets two compile-time variables for `receipt::VersionInfo::current`:
//! - `DGEM_BUILD_REVISION`: `git rev-parse HEAD` of the checkout being built,
//!   or `unknown` (no git, or not a repository: a source tarball);
//! - `DGEM_BUILD_DIRTY`: `true` when a tracked file the binary is built from
//!   (`crates/`, `vendor/`, `Cargo.toml`, `Cargo.lock`) differs from that
//!   commit, `false` when none does, `unknown` when git cannot tell.
//!
//! It reruns when any of those sources changes and when `HEAD` moves (a commit
//! or a checkout), so the two values always describe the sources compiled.
//! Nothing here touches the network.
use std::path::{Path, PathBuf};
use std::process::Command;

/// The sources a dgem binary is compiled from, relative to the workspace root.
const SOURCES: [&str; 4] = ["crates", "vendor", "Cargo.toml", "Cargo.lock"];

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let root = manifest.join("../..");
    for source in SOURCES {
        println!("cargo:rerun-if-changed={}", root.join(source).display());
    }
    // HEAD, and the branch file it points at (a commit rewrites that file, or
    // packed-refs once refs are packed).
    for name in ["HEAD", "packed-refs"] {
        if let Some(p) = git(&root, &["rev-parse", "--git-path", name]) {
            println!("cargo:rerun-if-changed={}", root.join(p).display());
        }
    }
    if let Some(branch) = git(&root, &["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&root, &["rev-parse", "--git-path", &branch]) {
            println!("cargo:rerun-if-changed={}", root.join(p).display());
        }
    }
    let revision = git(&root, &["rev-parse", "HEAD"])
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    let mut status = vec!["status", "--porcelain", "--untracked-files=no", "--"];
    status.extend(SOURCES);
    let dirty = match git(&root, &status) {
        Some(s) => (!s.is_empty()).to_string(),
        None => "unknown".to_owned(),
    };
    println!("cargo:rustc-env=DGEM_BUILD_REVISION={revision}");
    println!("cargo:rustc-env=DGEM_BUILD_DIRTY={dirty}");
}
