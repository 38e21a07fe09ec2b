//! Records which commit this build was made from, so that a receipt names the
//! binary's commit rather than whatever the working directory holds when the
//! benchmark runs.
//!
//! Sets two compile-time variables for `receipt::VersionInfo::current`:
//! - `DGEM_BUILD_REVISION`: `git rev-parse HEAD` of the checkout being built,
//!   or `unknown` (no git, or not a repository: a source tarball);
//! - `DGEM_BUILD_DIRTY`: `true` when a tracked file the binary is built from
//!   (see [`SOURCES`]) differs from that commit, `false` when none does,
//!   `unknown` when git cannot tell.
//!
//! It reruns when any of those sources changes and when `HEAD` moves (a commit
//! or a checkout), so the two values always describe the sources compiled.
//! Nothing here touches the network.
use std::path::{Path, PathBuf};
use std::process::Command;

/// The sources a dgem binary is compiled from, relative to the workspace root:
/// the crates, the patched vendored crates, the built-in policies
/// (`include_str!`), the manifest and lock file, the build configuration
/// (ggml's SIMD options) and the pinned toolchain. `scripts/receipts` checks
/// the same list before it runs.
const SOURCES: [&str; 7] = [
    "crates",
    "vendor",
    "templates",
    "Cargo.toml",
    "Cargo.lock",
    ".cargo/config.toml",
    "rust-toolchain.toml",
];

fn git(root: &Path, args: &[&str]) -> Option<String> {
    // `--no-optional-locks`: `git status` must not take the index lock, which
    // would make a commit running beside the build fail.
    let out = Command::new("git")
        .arg("--no-optional-locks")
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Asks cargo to rerun this script when `path` changes. Only paths that exist:
/// cargo treats a missing one as always changed, which would rebuild this
/// crate on every build.
fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let root = manifest.join("../..");
    for source in SOURCES {
        watch(&root.join(source));
    }
    // Only the checkout's own repository counts: sources unpacked inside
    // another repository are not that repository's commit.
    let top = git(&root, &["rev-parse", "--show-toplevel"]);
    let ours = match (top, std::fs::canonicalize(&root)) {
        (Some(top), Ok(root)) => std::fs::canonicalize(top).is_ok_and(|t| t == root),
        _ => false,
    };
    let (revision, dirty) = if ours {
        // HEAD, and where a commit writes: the branch's ref file, the refs
        // folder (a new branch) and packed-refs once refs are packed.
        for name in ["HEAD", "refs/heads", "packed-refs"] {
            if let Some(p) = git(&root, &["rev-parse", "--git-path", name]) {
                watch(&root.join(p));
            }
        }
        if let Some(branch) = git(&root, &["symbolic-ref", "-q", "HEAD"]) {
            if let Some(p) = git(&root, &["rev-parse", "--git-path", &branch]) {
                watch(&root.join(p));
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
        (revision, dirty)
    } else {
        ("unknown".to_owned(), "unknown".to_owned())
    };
    // The list itself, so that a test checks the dirty flag against the same
    // paths instead of a copy of them.
    println!("cargo:rustc-env=DGEM_BUILD_SOURCES={}", SOURCES.join(" "));
    println!("cargo:rustc-env=DGEM_BUILD_REVISION={revision}");
    println!("cargo:rustc-env=DGEM_BUILD_DIRTY={dirty}");
}
