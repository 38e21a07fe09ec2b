//! deploy/scripts/ when `gcloud` fails (issue 29). Each script runs from an
//! empty folder outside the repository, with stand-in `gcloud`, `kubectl`,
//! `curl` and `docker` first on PATH that record their arguments and fail (the
//! `gcloud` one as a gcloud with no account does). Every script must then exit
//! non-zero naming the step that failed, run nothing after it, write nothing,
//! and never print an image with an empty digest: `$(pinned_image)` used to
//! lose `set -e`, so `--render` printed `image: …@` and exited 0. Dry runs and
//! renders given IMAGE_DIGEST call none of the stand-ins.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use dgem_deploy_tests::repo_root;

const DIGEST: &str = "sha256:3333333333333333333333333333333333333333333333333333333333333333";
const NO_ACCOUNT: &str = "ERROR: (gcloud) You do not currently have an active account selected.";
const LOGIN_HINT: &str = "is gcloud logged in (gcloud auth login) with access to the project?";

/// The body of a `gcloud` with no account: an error on stderr, exit 1.
fn gcloud_fails() -> String {
    format!("echo '{NO_ACCOUNT}' >&2\nexit 1\n")
}

/// A fresh folder under the system temp dir: `bin/` holds the stand-ins,
/// `work/` is the (empty) working folder and HOME, `calls` logs each call
/// as `tool args…`, and `out/` (absent) is OUT_DIR. Removed on drop.
#[derive(Debug)]
struct Sandbox {
    dir: PathBuf,
}

/// A run's exit code, output and the stand-ins' calls, in order.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    calls: Vec<String>,
}

impl Sandbox {
    /// `gcloud_body`: the stand-in gcloud's shell lines after it logs the
    /// call; the other stand-ins print `TOOL: stand-in failure` and exit 1.
    fn new(name: &str, gcloud_body: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("dgem-gcloud-{name}-{}", std::process::id()));
        assert!(
            !dir.starts_with(repo_root()),
            "the temp dir {} is inside the repository",
            dir.display()
        );
        let _ = std::fs::remove_dir_all(&dir);
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).expect("bin dir");
        std::fs::create_dir_all(dir.join("work")).expect("work dir");
        let log = dir.join("calls");
        for tool in ["gcloud", "kubectl", "curl", "docker"] {
            let body = if tool == "gcloud" {
                gcloud_body.to_string()
            } else {
                format!("echo '{tool}: stand-in failure' >&2\nexit 1\n")
            };
            let path = bin.join(tool);
            let text = format!(
                "#!/bin/sh\necho \"{tool} $*\" >>'{}'\n{body}",
                log.display()
            );
            std::fs::write(&path, text).expect("stand-in");
            let chmod = Command::new("chmod")
                .arg("+x")
                .arg(&path)
                .status()
                .expect("chmod");
            assert!(chmod.success());
        }
        Sandbox { dir }
    }

    /// Run `bash <repo>/<script> args…` in `work/` with only PATH (the
    /// stand-ins first), HOME, PROJECT, TAG, OUT_DIR and `env` set.
    fn run(&self, script: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
        let log = self.dir.join("calls");
        std::fs::write(&log, "").expect("clear the call log");
        let work = self.dir.join("work");
        let mut dirs = vec![self.dir.join("bin")];
        if let Some(p) = std::env::var_os("PATH") {
            dirs.extend(std::env::split_paths(&p));
        }
        let path = std::env::join_paths(dirs).expect("PATH");
        let out = Command::new("bash")
            .arg(repo_root().join(script))
            .args(args)
            .env_clear()
            .env("PATH", &path)
            .env("HOME", &work)
            .env("PROJECT", "demo-proj")
            .env("TAG", "test")
            .env("OUT_DIR", self.dir.join("out"))
            .envs(env.iter().copied())
            .current_dir(&work)
            .output()
            .expect("bash runs");
        let calls = std::fs::read_to_string(&log).expect("call log");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            calls: calls.lines().map(str::to_string).collect(),
        }
    }

    /// Files a run left in `work/` or `out/` (neither may get any).
    fn written(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for d in [self.dir.join("work"), self.dir.join("out")] {
            if let Ok(entries) = std::fs::read_dir(&d) {
                found.extend(entries.filter_map(Result::ok).map(|e| e.path()));
            }
        }
        if self.dir.join("out").exists() {
            found.push(self.dir.join("out"));
        }
        found
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A line of `out` with an image reference whose digest is empty (`@` ending
/// a word) or an `image:` key without a value.
fn empty_digest(out: &str) -> Option<&str> {
    out.lines().find(|l| {
        let t = l.trim_end();
        let key = t.trim_start().trim_start_matches("- ");
        t.ends_with('@')
            || ["@ ", "@'", "@\"", "@,"].iter().any(|p| t.contains(p))
            || key
                .strip_prefix("image:")
                .is_some_and(|v| v.trim().is_empty())
    })
}

/// deploy/scripts/*.sh split into those that are run and those that are
/// sourced (their header says "Sourced, not run.").
fn scripts() -> (BTreeSet<String>, BTreeSet<String>) {
    let dir = repo_root().join("deploy/scripts");
    let mut run = BTreeSet::new();
    let mut sourced = BTreeSet::new();
    for e in std::fs::read_dir(&dir).expect("deploy/scripts") {
        let name = e.expect("entry").file_name().to_string_lossy().into_owned();
        if !name.ends_with(".sh") {
            continue;
        }
        let text = std::fs::read_to_string(dir.join(&name)).expect("script");
        let head: String = text.lines().take(3).collect::<Vec<_>>().join("\n");
        let rel = format!("deploy/scripts/{name}");
        if head.contains("Sourced, not run.") {
            sourced.insert(rel);
        } else {
            run.insert(rel);
        }
    }
    (run, sourced)
}

/// One run that must fail at a named step.
#[derive(Debug)]
struct Failing<'a> {
    script: &'a str,
    args: &'a [&'a str],
    env: &'a [(&'a str, &'a str)],
    /// What the failing stand-in printed on stderr (passed through).
    cause: &'a str,
    /// The error naming the step, on stderr.
    step: &'a str,
    /// The start of the last stand-in call, the failing one: nothing ran
    /// after it.
    last_call: &'a str,
}

const VLLM: &str =
    "vllm/vllm-openai@sha256:abababababababababababababababababababababababababababababababab";

fn failing_cases() -> Vec<Failing<'static>> {
    let digest: &'static [(&'static str, &'static str)] = &[("IMAGE_DIGEST", DIGEST)];
    vec![
        Failing {
            script: "deploy/scripts/bench_job.sh",
            args: &["--render"],
            env: &[],
            cause: NO_ACCOUNT,
            step: "error: could not resolve the digest of image `us-central1-docker.pkg.dev/demo-proj/dgem/dgem-cpu:test` (set IMAGE_DIGEST to skip this lookup): `gcloud artifacts docker images describe us-central1-docker.pkg.dev/demo-proj/dgem/dgem-cpu:test '--format=value(image_summary.digest)'` failed (exit status 1)",
            last_call: "gcloud artifacts docker images describe us-central1-docker.pkg.dev/demo-proj/dgem/dgem-cpu:test --format=value(image_summary.digest)",
        },
        Failing {
            script: "deploy/scripts/bench_job.sh",
            args: &[],
            env: digest,
            cause: NO_ACCOUNT,
            step: "error: step failed (exit status 1): `gcloud storage buckets create gs://dgem-bench-demo-proj --project demo-proj --location us-central1 --uniform-bucket-level-access`",
            last_call: "gcloud storage buckets create gs://dgem-bench-demo-proj --project demo-proj --location us-central1 --uniform-bucket-level-access",
        },
        Failing {
            script: "deploy/scripts/bench_job.sh",
            args: &["--k8s"],
            env: digest,
            cause: "kubectl: stand-in failure",
            step: "error: step failed (exit status 1): `kubectl apply -f -`",
            last_call: "kubectl apply -f -",
        },
        Failing {
            script: "deploy/scripts/build_push.sh",
            args: &[],
            env: &[("VLLM_IMAGE", VLLM)],
            cause: NO_ACCOUNT,
            step: "error: step failed (exit status 1): `gcloud artifacts repositories create dgem --project demo-proj --location us-central1 --repository-format docker --description 'dgem serving images'`",
            last_call: "gcloud artifacts repositories create dgem --project demo-proj --location us-central1 --repository-format docker --description dgem serving images",
        },
        Failing {
            script: "deploy/scripts/deploy_cloudrun.sh",
            args: &["--render"],
            env: &[],
            cause: NO_ACCOUNT,
            step: "error: could not resolve the digest of image `us-central1-docker.pkg.dev/demo-proj/dgem/dgem-serve:test` (set IMAGE_DIGEST to skip this lookup): `gcloud artifacts docker images describe us-central1-docker.pkg.dev/demo-proj/dgem/dgem-serve:test '--format=value(image_summary.digest)'` failed (exit status 1)",
            last_call: "gcloud artifacts docker images describe us-central1-docker.pkg.dev/demo-proj/dgem/dgem-serve:test --format=value(image_summary.digest)",
        },
        Failing {
            script: "deploy/scripts/deploy_cloudrun.sh",
            args: &["--yaml"],
            env: &[("TIER", "l4")],
            cause: NO_ACCOUNT,
            step: "error: could not resolve the digest of image `us-central1-docker.pkg.dev/demo-proj/dgem/dgem-serve:test` (set IMAGE_DIGEST to skip this lookup)",
            last_call: "gcloud artifacts docker images describe us-central1-docker.pkg.dev/demo-proj/dgem/dgem-serve:test --format=value(image_summary.digest)",
        },
        Failing {
            script: "deploy/scripts/deploy_cloudrun.sh",
            args: &[],
            env: digest,
            cause: NO_ACCOUNT,
            step: "error: step failed (exit status 1): `gcloud beta run deploy dgemma --project demo-proj --region us-central1 --image us-central1-docker.pkg.dev/demo-proj/dgem/dgem-serve@sha256:3333333333333333333333333333333333333333333333333333333333333333 ",
            last_call: "gcloud beta run deploy dgemma --project demo-proj --region us-central1 --image us-central1-docker.pkg.dev/demo-proj/dgem/dgem-serve@sha256:3333333333333333333333333333333333333333333333333333333333333333 --service-account ",
        },
        Failing {
            // Its dry run asks nothing (a placeholder digest): run it for real.
            script: "deploy/scripts/deploy_vertex.sh",
            args: &[],
            env: &[],
            cause: NO_ACCOUNT,
            step: "error: could not resolve the digest of image `us-central1-docker.pkg.dev/demo-proj/dgem/dgem-serve:test` (set IMAGE_DIGEST to skip this lookup): `gcloud artifacts docker images describe us-central1-docker.pkg.dev/demo-proj/dgem/dgem-serve:test '--format=value(image_summary.digest)'` failed (exit status 1)",
            last_call: "gcloud artifacts docker images describe us-central1-docker.pkg.dev/demo-proj/dgem/dgem-serve:test --format=value(image_summary.digest)",
        },
        Failing {
            script: "deploy/scripts/deploy_vertex.sh",
            args: &[],
            env: digest,
            cause: NO_ACCOUNT,
            step: "error: could not get an access token for the Vertex AI API: `gcloud auth print-access-token` failed (exit status 1)",
            last_call: "gcloud auth print-access-token",
        },
        Failing {
            script: "deploy/scripts/stage_weights.sh",
            args: &[],
            env: &[],
            cause: NO_ACCOUNT,
            step: "error: step failed (exit status 1): `gcloud storage buckets create gs://dgem-weights-demo-proj --project demo-proj --location us-central1 --uniform-bucket-level-access`",
            last_call: "gcloud storage buckets create gs://dgem-weights-demo-proj --project demo-proj --location us-central1 --uniform-bucket-level-access",
        },
        Failing {
            script: "deploy/scripts/teardown_cloudrun.sh",
            args: &[],
            env: &[],
            cause: NO_ACCOUNT,
            step: "error: step failed (exit status 1): `gcloud run services delete dgemma --project demo-proj --region us-central1 --quiet`",
            last_call: "gcloud run services delete dgemma --project demo-proj --region us-central1 --quiet",
        },
        Failing {
            // A failed lookup in a `for` word list used to end it with status 0.
            script: "deploy/scripts/teardown_vertex.sh",
            args: &[],
            env: &[],
            cause: NO_ACCOUNT,
            step: "error: could not list the Vertex AI endpoints named `dgemma-dedicated-g4`: `gcloud ai endpoints list --project demo-proj --region us-central1 --filter=display_name=dgemma-dedicated-g4 '--format=value(name)'` failed (exit status 1)",
            last_call: "gcloud ai endpoints list --project demo-proj --region us-central1 --filter=display_name=dgemma-dedicated-g4 --format=value(name)",
        },
    ]
}

#[test]
fn every_script_fails_naming_the_step_when_gcloud_fails() {
    let cases = failing_cases();
    let (run_scripts, sourced) = scripts();
    assert_eq!(
        sourced,
        BTreeSet::from([
            "deploy/scripts/cloudrun_profile.sh".to_string(),
            "deploy/scripts/common.sh".to_string()
        ])
    );
    let covered: BTreeSet<String> = cases.iter().map(|c| c.script.to_string()).collect();
    assert_eq!(covered, run_scripts, "every script that is run has a case");
    let sandbox = Sandbox::new("fails", &gcloud_fails());
    for c in &cases {
        let what = format!("{} {:?} {:?}", c.script, c.args, c.env);
        let run = sandbox.run(c.script, c.args, c.env);
        assert_eq!(run.code, 1, "{what}: {}", run.stderr);
        assert!(run.stderr.contains(c.cause), "{what}: {}", run.stderr);
        assert!(run.stderr.contains(c.step), "{what}: {}", run.stderr);
        if c.cause == NO_ACCOUNT {
            assert!(run.stderr.contains(LOGIN_HINT), "{what}: {}", run.stderr);
        }
        let last = run.calls.last().map_or("", String::as_str);
        assert!(last.starts_with(c.last_call), "{what}: {:?}", run.calls);
        assert_eq!(empty_digest(&run.stdout), None, "{what}: {}", run.stdout);
        assert!(run.stdout.is_empty(), "{what} printed: {}", run.stdout);
        assert_eq!(sandbox.written(), Vec::<PathBuf>::new(), "{what}");
    }
}

#[test]
fn dry_runs_and_renders_with_a_digest_call_no_stand_in() {
    let sandbox = Sandbox::new("dry", &gcloud_fails());
    let image = format!("@{DIGEST}");
    // Script, arguments, whether the output names the pinned image.
    let cases: [(&str, &[&str], bool); 12] = [
        ("deploy/scripts/bench_job.sh", &["--render"], true),
        ("deploy/scripts/bench_job.sh", &["--dry-run"], true),
        ("deploy/scripts/bench_job.sh", &["--render", "--k8s"], true),
        ("deploy/scripts/bench_job.sh", &["--dry-run", "--k8s"], true),
        ("deploy/scripts/build_push.sh", &["--dry-run"], false),
        ("deploy/scripts/deploy_cloudrun.sh", &["--render"], true),
        ("deploy/scripts/deploy_cloudrun.sh", &["--dry-run"], true),
        (
            "deploy/scripts/deploy_cloudrun.sh",
            &["--yaml", "--dry-run"],
            true,
        ),
        ("deploy/scripts/deploy_vertex.sh", &["--dry-run"], true),
        ("deploy/scripts/stage_weights.sh", &["--dry-run"], false),
        ("deploy/scripts/teardown_cloudrun.sh", &["--dry-run"], false),
        ("deploy/scripts/teardown_vertex.sh", &["--dry-run"], false),
    ];
    for (script, args, names_image) in cases {
        let run = sandbox.run(script, args, &[("IMAGE_DIGEST", DIGEST)]);
        assert_eq!(run.code, 0, "{script} {args:?}: {}", run.stderr);
        assert!(run.calls.is_empty(), "{script} {args:?}: {:?}", run.calls);
        assert_eq!(empty_digest(&run.stdout), None, "{script}: {}", run.stdout);
        if names_image {
            assert!(
                run.stdout.contains(&image),
                "{script} {args:?}: {}",
                run.stdout
            );
        }
        assert_eq!(
            sandbox.written(),
            Vec::<PathBuf>::new(),
            "{script} {args:?}"
        );
    }
}

#[test]
fn the_digest_gcloud_prints_is_used_only_when_it_is_one() {
    let other = "sha256:4444444444444444444444444444444444444444444444444444444444444444";
    let good = Sandbox::new("good-digest", &format!("echo {other}\n"));
    let empty = Sandbox::new("empty-digest", "exit 0\n");
    for (script, name, key) in [
        ("deploy/scripts/bench_job.sh", "dgem-cpu", "image: "),
        (
            "deploy/scripts/deploy_cloudrun.sh",
            "dgem-serve",
            "- image: ",
        ),
    ] {
        let tagged = format!("us-central1-docker.pkg.dev/demo-proj/dgem/{name}:test");
        let describe = format!(
            "gcloud artifacts docker images describe {tagged} --format=value(image_summary.digest)"
        );
        let run = good.run(script, &["--render"], &[]);
        assert_eq!(run.code, 0, "{script}: {}", run.stderr);
        assert_eq!(run.calls, std::slice::from_ref(&describe));
        let line = format!("{key}us-central1-docker.pkg.dev/demo-proj/dgem/{name}@{other}\n");
        assert!(run.stdout.contains(&line), "{script}: {}", run.stdout);
        assert_eq!(empty_digest(&run.stdout), None, "{script}: {}", run.stdout);

        // gcloud succeeds but prints no digest: refused, naming the lookup.
        let run = empty.run(script, &["--render"], &[]);
        assert_eq!(run.code, 1, "{script}: {}", run.stderr);
        assert_eq!(run.calls, [describe]);
        assert!(run.stdout.is_empty(), "{script} printed: {}", run.stdout);
        assert_eq!(
            run.stderr.trim(),
            format!("error: could not resolve the digest of image `{tagged}` (set IMAGE_DIGEST to skip this lookup): `gcloud artifacts docker images describe` printed ``, not sha256:<64 hex>; was the image pushed (deploy/scripts/build_push.sh)?")
        );
    }
}

#[test]
fn empty_digest_finds_each_form() {
    for bad in [
        "              image: us-central1-docker.pkg.dev/p/dgem/dgem-cpu@\n",
        "        - image: \n",
        "gcloud beta run deploy s --image r/p/i@ --port 8080\n",
        "{\"imageUri\": \"r/p/i@\", \"x\": 1}\n",
    ] {
        assert!(empty_digest(bad).is_some(), "{bad}");
    }
    assert_eq!(
        empty_digest(&format!(
            "image: r/p/i@{DIGEST}\nsa@p.iam.gserviceaccount.com\n"
        )),
        None
    );
}
