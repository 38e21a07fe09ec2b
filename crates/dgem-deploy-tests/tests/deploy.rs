//! deploy/ checked without cloud access: shellcheck on every script, the
//! Dockerfile's stages and pinned base, the rendered Cloud Run YAML (probe,
//! GPU tier sizes, zonal redundancy off), and snapshots of each script's
//! `--dry-run` commands.
// A missing shellcheck is reported with a note on stderr, like the model tests.
#![allow(clippy::print_stderr)]

use std::collections::BTreeSet;

use dgem_deploy_tests::{parse_dockerfile, repo_root, run_script, ScriptRun};
use yaml_rust2::{Yaml, YamlLoader};

/// Snapshot name, script, extra environment.
type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

fn env_for<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut env = vec![
        ("PROJECT", "demo-proj"),
        ("TAG", "test"),
        ("IMAGE_DIGEST", DIGEST),
    ];
    env.extend_from_slice(extra);
    env
}

fn dry(script: &str, extra: &[(&str, &str)]) -> ScriptRun {
    let run = run_script(script, &["--dry-run"], &env_for(extra)).expect("bash runs");
    assert_eq!(run.code, 0, "{script} failed: {}", run.stderr);
    run
}

fn scripts() -> Vec<String> {
    let dir = repo_root().join("deploy/scripts");
    let mut v: Vec<String> = std::fs::read_dir(&dir)
        .expect("deploy/scripts")
        .filter_map(|e| e.ok())
        .map(|e| format!("deploy/scripts/{}", e.file_name().to_string_lossy()))
        .filter(|n| n.ends_with(".sh"))
        .collect();
    v.sort();
    v
}

#[test]
fn shellcheck_is_clean() {
    let Ok(version) = std::process::Command::new("shellcheck")
        .arg("--version")
        .output()
    else {
        // Under CI a missing shellcheck fails, so a green CI means it ran.
        assert!(
            std::env::var("CI").is_err(),
            "CI must install shellcheck (scripts/deps does)"
        );
        eprintln!("note: shellcheck is not installed (scripts/deps installs it); skipping");
        return;
    };
    assert!(version.status.success());
    let mut files = scripts();
    files.push("deploy/entrypoint.sh".into());
    assert!(files.len() >= 8, "scripts found: {files:?}");
    let out = std::process::Command::new("shellcheck")
        .arg("-x")
        .args(&files)
        .current_dir(repo_root())
        .output()
        .expect("shellcheck runs");
    assert!(
        out.status.success(),
        "shellcheck:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn dockerfile_builds_dgem_then_pins_vllm_by_digest() {
    let root = repo_root();
    let text = std::fs::read_to_string(root.join("deploy/Dockerfile")).expect("Dockerfile");
    let ins = parse_dockerfile(&text);
    // The base image is an ARG before the first FROM, pinned by a sha256 digest.
    let arg = ins.first().expect("instructions");
    assert_eq!(arg.keyword, "ARG");
    let base = arg
        .args
        .strip_prefix("VLLM_IMAGE=")
        .expect("ARG VLLM_IMAGE=");
    let (repo, digest) = base.split_once("@sha256:").expect("pinned by digest");
    assert_eq!(repo, "vllm/vllm-openai");
    assert_eq!(digest.len(), 64);
    assert!(digest.bytes().all(|b| b.is_ascii_hexdigit()));
    // Two stages: a Rust builder on the pinned toolchain, then the vLLM image.
    let froms: Vec<&str> = ins
        .iter()
        .filter(|i| i.keyword == "FROM")
        .map(|i| i.args.as_str())
        .collect();
    let toolchain = std::fs::read_to_string(root.join("rust-toolchain.toml")).expect("toolchain");
    let channel = toolchain
        .lines()
        .find_map(|l| l.strip_prefix("channel = \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("channel");
    let minor: Vec<&str> = channel.split('.').take(2).collect();
    assert_eq!(
        froms,
        [
            format!("rust:{}-bullseye AS builder", minor.join(".")).as_str(),
            "${VLLM_IMAGE} AS serve"
        ]
    );
    let serve: Vec<_> = ins
        .iter()
        .skip_while(|i| i.args != "${VLLM_IMAGE} AS serve")
        .collect();
    let has = |kw: &str, args: &str| serve.iter().any(|i| i.keyword == kw && i.args == args);
    assert!(has("COPY", "--from=builder /out/dgem /usr/local/bin/dgem"));
    assert!(has(
        "COPY",
        "deploy/entrypoint.sh /usr/local/bin/dgem-entrypoint"
    ));
    assert!(has("EXPOSE", "8080"));
    assert_eq!(
        serve.last().map(|i| (i.keyword.as_str(), i.args.as_str())),
        Some(("ENTRYPOINT", r#"["/usr/local/bin/dgem-entrypoint"]"#))
    );
    // The builder compiles the dgem binary with the lock file.
    assert!(ins.iter().any(|i| i.keyword == "RUN"
        && i.args
            .contains("cargo build --release --locked -p dgem-cli --bin dgem")));
    // Every local COPY source exists in the repository.
    for i in ins
        .iter()
        .filter(|i| i.keyword == "COPY" && !i.args.starts_with("--from"))
    {
        let words: Vec<&str> = i.args.split_whitespace().collect();
        for src in &words[..words.len() - 1] {
            assert!(root.join(src).exists(), "COPY source `{src}` missing");
        }
    }
}

fn render(tier: &str) -> Yaml {
    let run = run_script(
        "deploy/scripts/deploy_cloudrun.sh",
        &["--render"],
        &env_for(&[("TIER", tier)]),
    )
    .expect("bash runs");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut docs = YamlLoader::load_from_str(&run.stdout).expect("valid YAML");
    assert_eq!(docs.len(), 1);
    docs.remove(0)
}

#[test]
fn cloud_run_yaml_has_the_http_probe_and_tier_sizes() {
    for (tier, cpu, mem, gpu, staging) in [
        ("rtxpro6000", "20", "80Gi", "nvidia-rtx-pro-6000", "tmpfs"),
        ("l4", "8", "32Gi", "nvidia-l4", "fuse"),
    ] {
        let y = render(tier);
        assert_eq!(y["kind"].as_str(), Some("Service"));
        let tmpl = &y["spec"]["template"];
        let ann = &tmpl["metadata"]["annotations"];
        assert_eq!(
            ann["run.googleapis.com/gpu-zonal-redundancy-disabled"].as_str(),
            Some("true")
        );
        assert_eq!(
            ann["run.googleapis.com/execution-environment"].as_str(),
            Some("gen2")
        );
        assert_eq!(
            ann["run.googleapis.com/cpu-throttling"].as_str(),
            Some("false")
        );
        assert_eq!(
            tmpl["spec"]["nodeSelector"]["run.googleapis.com/accelerator"].as_str(),
            Some(gpu)
        );
        let c = &tmpl["spec"]["containers"][0];
        assert_eq!(
            c["image"].as_str(),
            Some(format!("us-central1-docker.pkg.dev/demo-proj/dgem/dgem-serve@{DIGEST}").as_str())
        );
        let limits = &c["resources"]["limits"];
        assert_eq!(limits["cpu"].as_str(), Some(cpu), "{tier}");
        assert_eq!(limits["memory"].as_str(), Some(mem), "{tier}");
        assert_eq!(limits["nvidia.com/gpu"].as_str(), Some("1"));
        // Startup probe: httpGet /health, short period, many failures, never TCP.
        let p = &c["startupProbe"];
        assert!(p["tcpSocket"].is_badvalue(), "no TCP probe");
        assert_eq!(p["httpGet"]["path"].as_str(), Some("/health"));
        assert_eq!(p["httpGet"]["port"].as_i64(), Some(8080));
        let period = p["periodSeconds"].as_i64().expect("period");
        let timeout = p["timeoutSeconds"].as_i64().expect("timeout");
        let failures = p["failureThreshold"].as_i64().expect("failures");
        assert_eq!(
            (p["initialDelaySeconds"].as_i64(), period, timeout, failures),
            (Some(10), 5, 4, 120)
        );
        assert!(
            timeout < period && period <= 10 && failures >= 60,
            "short period, many retries"
        );
        assert!(period * failures >= 600, "a 10-minute window");
        let env: Vec<(String, String)> = c["env"]
            .as_vec()
            .expect("env")
            .iter()
            .filter_map(|e| {
                Some((
                    e["name"].as_str()?.to_string(),
                    e["value"].as_str()?.to_string(),
                ))
            })
            .collect();
        assert!(
            env.contains(&("STAGING".into(), staging.into())),
            "{tier}: {env:?}"
        );
        assert!(env.contains(&(
            "DGEM_WEIGHTS_URI".into(),
            "gs://dgem-weights-demo-proj/dgemma".into()
        )));
        let names: BTreeSet<&str> = env.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.len(), env.len(), "no duplicate env names");
    }
}

#[test]
fn cloud_run_flags_match_the_tier() {
    for (tier, flags) in [
        ("rtxpro6000", "--cpu 20 --memory 80Gi --gpu 1 --gpu-type nvidia-rtx-pro-6000 --no-gpu-zonal-redundancy"),
        ("l4", "--cpu 8 --memory 32Gi --gpu 1 --gpu-type nvidia-l4 --no-gpu-zonal-redundancy"),
    ] {
        let out = dry("deploy/scripts/deploy_cloudrun.sh", &[("TIER", tier)]).stdout;
        assert!(out.contains(flags), "{tier}: {out}");
        assert!(out.contains("--startup-probe=httpGet.path=/health,httpGet.port=8080,initialDelaySeconds=10,periodSeconds=5,timeoutSeconds=4,failureThreshold=120"));
        assert!(!out.contains("tcpSocket"));
    }
    let bad = run_script(
        "deploy/scripts/deploy_cloudrun.sh",
        &["--dry-run"],
        &env_for(&[("TIER", "a100")]),
    )
    .expect("runs");
    assert_eq!(bad.code, 1);
    assert_eq!(
        bad.stderr.trim(),
        "error: `TIER` must be one of [rtxpro6000, l4]. Given: `a100`"
    );
    let no_project =
        run_script("deploy/scripts/teardown_cloudrun.sh", &["--dry-run"], &[]).expect("runs");
    assert_eq!(no_project.code, 1);
    assert!(
        no_project.stderr.contains("`PROJECT` must be set"),
        "{}",
        no_project.stderr
    );
}

#[test]
fn dry_run_commands_snapshot() {
    let cases: [Case<'_>; 8] = [
        ("build_push", "deploy/scripts/build_push.sh", &[]),
        (
            "stage_weights",
            "deploy/scripts/stage_weights.sh",
            &[("OUT_DIR", "/tmp/dgem-deploy-test-out")],
        ),
        (
            "deploy_cloudrun_rtxpro6000",
            "deploy/scripts/deploy_cloudrun.sh",
            &[
                ("TIER", "rtxpro6000"),
                ("HF_TOKEN_SECRET", "dgemma-hf-token"),
            ],
        ),
        (
            "deploy_cloudrun_l4",
            "deploy/scripts/deploy_cloudrun.sh",
            &[("TIER", "l4")],
        ),
        ("deploy_vertex_g4", "deploy/scripts/deploy_vertex.sh", &[]),
        (
            "deploy_vertex_l4",
            "deploy/scripts/deploy_vertex.sh",
            &[("VERTEX_PROFILE", "g2-l4")],
        ),
        (
            "teardown_cloudrun",
            "deploy/scripts/teardown_cloudrun.sh",
            &[],
        ),
        ("teardown_vertex", "deploy/scripts/teardown_vertex.sh", &[]),
    ];
    for (name, script, extra) in cases {
        let out = dry(script, extra).stdout;
        assert!(!out.trim().is_empty(), "{name} printed nothing");
        insta::assert_snapshot!(name, out);
    }
}

#[test]
fn vertex_upload_routes_everything_and_checks_health() {
    let out = dry("deploy/scripts/deploy_vertex.sh", &[]).stdout;
    assert!(out.contains(r#""invokeRoutePrefix": "/*", "healthRoute": "/health""#));
    assert!(out.contains(r#""dedicatedEndpointEnabled": true"#));
    assert!(out
        .contains(r#""machineType": "g4-standard-48", "acceleratorType": "NVIDIA_RTX_PRO_6000""#));
    let l4 = dry(
        "deploy/scripts/deploy_vertex.sh",
        &[("VERTEX_PROFILE", "g2-l4")],
    )
    .stdout;
    assert!(l4.contains(r#""machineType": "g2-standard-16", "acceleratorType": "NVIDIA_L4""#));
}

#[test]
fn entrypoint_plans_each_staging_mode() {
    let ep = "deploy/entrypoint.sh";
    let tmpfs = run_script(
        ep,
        &[],
        &[
            ("DRY_RUN", "1"),
            ("DGEM_WEIGHTS_URI", "gs://b/dgemma"),
            ("DISABLE_MM", "0"),
            ("AIP_HTTP_PORT", "7080"),
        ],
    )
    .expect("runs");
    assert_eq!(tmpfs.code, 0, "{}", tmpfs.stderr);
    insta::assert_snapshot!("entrypoint_tmpfs", tmpfs.stdout);
    let fuse = run_script(
        ep,
        &[],
        &[
            ("DRY_RUN", "1"),
            ("STAGING", "fuse"),
            ("CANVAS", "32"),
            ("MAX_MODEL_LEN", "32768"),
        ],
    )
    .expect("runs");
    assert_eq!(fuse.code, 0, "{}", fuse.stderr);
    insta::assert_snapshot!("entrypoint_fuse", fuse.stdout);
    let none = run_script(ep, &[], &[("DRY_RUN", "1"), ("MODEL", "/nonexistent")]).expect("runs");
    assert_eq!(none.code, 1);
    assert!(none.stderr.contains("error: no weights"), "{}", none.stderr);
}

/// Script, arguments, environment, expected stderr fragment.
type ErrCase<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str)], &'a str);

#[test]
fn configuration_errors_exit_1_not_2() {
    let ep = "deploy/entrypoint.sh";
    let cases: [ErrCase<'_>; 7] = [
        (
            ep,
            &[],
            &[("DRY_RUN", "1"), ("MODEL", "/nonexistent")],
            "error: no weights",
        ),
        (
            ep,
            &[],
            &[("DRY_RUN", "1"), ("STAGING", "bogus")],
            "error: `STAGING` must be one of [auto, tmpfs, fuse, baked]. Given: `bogus`",
        ),
        (
            ep,
            &[],
            &[("DRY_RUN", "1"), ("DGEM_WEIGHTS_URI", "notauri")],
            "error: `DGEM_WEIGHTS_URI` must be gs://BUCKET[/PREFIX], an http(s):// URL or an absolute path. Given: `notauri`",
        ),
        (
            "deploy/scripts/deploy_vertex.sh",
            &["--dry-run"],
            &[],
            "error: `PROJECT` must be set",
        ),
        (
            "deploy/scripts/deploy_vertex.sh",
            &["--dry-run"],
            &[("PROJECT", "p"), ("VERTEX_PROFILE", "tpu")],
            "error: `VERTEX_PROFILE` must be one of [g4-rtxpro6000, g2-l4]. Given: `tpu`",
        ),
        (
            "deploy/scripts/stage_weights.sh",
            &["--bogus"],
            &[("PROJECT", "p")],
            "error: unknown argument `--bogus`; allowed: --dry-run, --help",
        ),
        (
            "deploy/scripts/deploy_cloudrun.sh",
            &["--bogus"],
            &[("PROJECT", "p")],
            "error: unknown argument `--bogus`; allowed: --dry-run, --render, --yaml, --help",
        ),
    ];
    for (script, args, env, want) in cases {
        let run = run_script(script, args, env).expect("runs");
        assert_eq!(run.code, 1, "{script} {args:?} {env:?}: {}", run.stderr);
        assert!(run.stderr.contains(want), "{script}: {}", run.stderr);
        assert!(run.stdout.is_empty(), "{script} ran on: {}", run.stdout);
    }
}

#[test]
fn entrypoint_accepts_each_weights_uri_form() {
    for uri in ["gs://b/dgemma", "https://h.example/w/", "/data/dgemma"] {
        let run = run_script(
            "deploy/entrypoint.sh",
            &[],
            &[("DRY_RUN", "1"), ("DGEM_WEIGHTS_URI", uri)],
        )
        .expect("runs");
        assert_eq!(run.code, 0, "{uri}: {}", run.stderr);
        assert!(
            run.stdout
                .contains(&format!("dgem stage {uri} /tmp/dgemma")),
            "{}",
            run.stdout
        );
    }
}

#[test]
fn entrypoint_passes_staging_dir_only_in_tmpfs_mode() {
    let serve_line = |env: &[(&str, &str)]| {
        let run = run_script("deploy/entrypoint.sh", &[], env).expect("runs");
        assert_eq!(run.code, 0, "{}", run.stderr);
        run.stdout
            .lines()
            .find(|l| l.starts_with("dgem serve"))
            .expect("serve line")
            .to_string()
    };
    let tmpfs = serve_line(&[("DRY_RUN", "1"), ("DGEM_WEIGHTS_URI", "gs://b/d")]);
    assert!(tmpfs.contains("--staging-dir /tmp/dgemma"), "{tmpfs}");
    let fuse = serve_line(&[("DRY_RUN", "1"), ("STAGING", "fuse")]);
    assert_eq!(
        fuse,
        "dgem serve --port 8080 --backend vllm=http://127.0.0.1:8000 --tokenizer /mnt/gcs/dgemma/tokenizer.json"
    );
    let baked = serve_line(&[("DRY_RUN", "1"), ("STAGING", "baked")]);
    assert!(!baked.contains("--staging-dir"), "{baked}");
}

#[test]
fn vertex_dry_run_token_header_is_pasteable() {
    let out = dry("deploy/scripts/deploy_vertex.sh", &[]).stdout;
    assert!(
        out.contains(r#"-H "Authorization: Bearer $(gcloud auth print-access-token)""#),
        "{out}"
    );
    assert!(!out.contains("'Authorization"), "{out}");
    // Pasted into bash, the header word expands the substitution.
    let line = out
        .lines()
        .find(|l| l.starts_with("curl"))
        .expect("curl line");
    let header = line.split(" -H ").nth(1).expect("header word").to_string();
    let expanded = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("gcloud() {{ echo TOKEN; }}; printf '%s' {header}"))
        .output()
        .expect("bash");
    assert_eq!(
        String::from_utf8_lossy(&expanded.stdout),
        "Authorization: Bearer TOKEN"
    );
}

/// A fresh, absent directory under the system temp dir.
fn absent_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("dgem-deploy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn cloudrun_yaml_dry_run_prints_the_yaml_it_would_replace_with() {
    let out_dir = absent_dir("cloudrun-yaml");
    let o = out_dir.display().to_string();
    let run = run_script(
        "deploy/scripts/deploy_cloudrun.sh",
        &["--yaml", "--dry-run"],
        &env_for(&[("OUT_DIR", o.as_str())]),
    )
    .expect("runs");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let file = format!("{o}/service-rtxpro6000.yaml");
    assert!(
        run.stdout
            .starts_with(&format!("mkdir -p {o} && cat >{file} <<'EOF_DGEM'\n")),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("\nkind: Service\n"), "{}", run.stdout);
    assert!(run.stdout.ends_with(&format!(
        "EOF_DGEM\ngcloud beta run services replace {file} --project demo-proj --region us-central1\n"
    )));
    assert!(!out_dir.exists(), "a dry run wrote {}", out_dir.display());
    // Pasting the printed lines writes the file the command then uses.
    let pasted = std::process::Command::new("bash")
        .arg("-c")
        .arg(run.stdout.replace("gcloud beta run", "true gcloud"))
        .output()
        .expect("bash");
    assert!(pasted.status.success());
    let written = std::fs::read_to_string(&file).expect("written by the pasted lines");
    assert!(written.contains("kind: Service"));
    let _ = std::fs::remove_dir_all(&out_dir);
}

#[test]
fn stage_weights_dry_run_writes_nothing() {
    let out_dir = absent_dir("stage-weights");
    let o = out_dir.display().to_string();
    let run = run_script(
        "deploy/scripts/stage_weights.sh",
        &["--dry-run"],
        &env_for(&[("OUT_DIR", o.as_str())]),
    )
    .expect("runs");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!out_dir.exists(), "a dry run wrote {}", out_dir.display());
    assert!(run.stdout.contains(&format!(
        "cat >{o}/stage-weights.cloudbuild.yaml <<'EOF_DGEM'"
    )));
}

/// Regression: the serving image's builder copied neither `vendor/` (the
/// patched gtmpl of `[patch.crates-io]`) nor `templates/` (compiled into the
/// binary), so `cargo build --locked` could not succeed inside it.
#[test]
fn the_builder_copies_every_source_the_build_reads() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join("deploy/Dockerfile")).expect("Dockerfile");
    for line in [
        "COPY crates ./crates",
        "COPY vendor ./vendor",
        "COPY templates ./templates",
    ] {
        assert!(text.lines().any(|l| l.trim() == line), "missing `{line}`");
    }
}

/// Issue 28 item 8: the serving image reads decisions from vLLM only, so its
/// builder compiles dgem without the `embedded` feature (no llama.cpp, no
/// cmake or libclang), with what `dgem serve --backend vllm=…` uses: the vLLM
/// reader, `/mcp` and the Studio.
#[test]
fn the_serving_image_builds_dgem_without_llama_cpp() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join("deploy/Dockerfile")).expect("Dockerfile");
    let ins = parse_dockerfile(&text);
    let build = ins
        .iter()
        .find(|i| i.keyword == "RUN" && i.args.contains("cargo build"))
        .expect("a cargo build");
    assert!(
        build.args.contains("--no-default-features"),
        "{}",
        build.args
    );
    let features: Vec<&str> = build
        .args
        .split("--features")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("--features LIST")
        .split(',')
        .collect();
    assert_eq!(features, ["vllm", "mcp", "studio", "mimalloc"]);
    assert!(
        !ins.iter()
            .any(|i| i.keyword == "RUN" && i.args.contains("libclang")),
        "llama.cpp's build tools are installed"
    );
    // The entrypoint passes the served model's tokenizer.json: a build
    // without llama.cpp reads no GGUF vocabulary.
    let entry = std::fs::read_to_string(root.join("deploy/entrypoint.sh")).expect("entrypoint");
    assert!(entry.contains("--tokenizer \"$model/tokenizer.json\""));
}
