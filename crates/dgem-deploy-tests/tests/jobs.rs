//! deploy/jobs/ and deploy/scripts/bench_job.sh checked without any cloud or
//! cluster: the manifests as the script renders them (task count, shard count,
//! per-index receipts, `--resume`, the downward API, non-root), the shell line
//! each task runs (executed here with a stand-in `dgem` that records its
//! arguments), and the commands a dry run prints, in order, writing nothing.
//! shellcheck of the script is deploy.rs's job: it checks every
//! deploy/scripts/*.sh.

use std::path::PathBuf;
use std::process::Command;

use dgem_deploy_tests::{repo_root, run_script, ScriptRun};
use yaml_rust2::{Yaml, YamlLoader};

const SCRIPT: &str = "deploy/scripts/bench_job.sh";
const DIGEST: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
const IMAGE: &str = "us-central1-docker.pkg.dev/demo-proj/dgem/dgem-cpu";

fn env_for<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut env = vec![
        ("PROJECT", "demo-proj"),
        ("TAG", "test"),
        ("IMAGE_DIGEST", DIGEST),
    ];
    env.extend_from_slice(extra);
    env
}

fn script(args: &[&str], extra: &[(&str, &str)]) -> ScriptRun {
    let run = run_script(SCRIPT, args, &env_for(extra)).expect("bash runs");
    assert_eq!(run.code, 0, "{args:?} {extra:?}: {}", run.stderr);
    run
}

fn render(args: &[&str], extra: &[(&str, &str)]) -> Vec<Yaml> {
    let mut a = vec!["--render"];
    a.extend_from_slice(args);
    YamlLoader::load_from_str(&script(&a, extra).stdout).expect("valid YAML")
}

fn s<'a>(y: &'a Yaml, what: &str) -> &'a str {
    y.as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {y:?}"))
}

/// A fresh, absent directory under the system temp dir.
fn absent_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dgem-jobs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Run a task's `sh -c` line with `/results` moved to a temp folder and a
/// stand-in `dgem` on PATH; return the arguments it was called with and the
/// temp folder.
fn run_task_line(line: &str, name: &str, env: &[(&str, &str)]) -> (Vec<String>, PathBuf) {
    let dir = absent_dir(name);
    let bin = dir.join("bin");
    let results = dir.join("results");
    std::fs::create_dir_all(&bin).expect("bin dir");
    let argv_file = dir.join("argv");
    let fake = bin.join("dgem");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" >{}\n",
            argv_file.display()
        ),
    )
    .expect("fake dgem");
    let chmod = Command::new("chmod")
        .arg("+x")
        .arg(&fake)
        .status()
        .expect("chmod");
    assert!(chmod.success());
    let line = line.replace("/results", &results.display().to_string());
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let out = Command::new("sh")
        .arg("-c")
        .arg(&line)
        .env_clear()
        .env("PATH", path)
        .envs(env.iter().copied())
        .output()
        .expect("sh runs");
    assert!(
        out.status.success(),
        "`{line}`: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let argv = std::fs::read_to_string(&argv_file).expect("dgem was called");
    (argv.lines().map(str::to_string).collect(), results)
}

#[test]
fn cloud_run_job_runs_one_shard_per_task() {
    let docs = render(&[], &[]);
    assert_eq!(docs.len(), 1);
    let y = &docs[0];
    assert_eq!(y["apiVersion"].as_str(), Some("run.googleapis.com/v1"));
    assert_eq!(y["kind"].as_str(), Some("Job"));
    assert_eq!(y["metadata"]["name"].as_str(), Some("dgem-bench"));
    assert_eq!(
        y["metadata"]["labels"]["cloud.googleapis.com/location"].as_str(),
        Some("us-central1")
    );
    let exec = &y["spec"]["template"]["spec"];
    assert_eq!(exec["taskCount"].as_i64(), Some(4));
    assert_eq!(exec["parallelism"].as_i64(), exec["taskCount"].as_i64());
    let task = &exec["template"]["spec"];
    assert_eq!(task["maxRetries"].as_i64(), Some(3));
    assert_eq!(task["timeoutSeconds"].as_str(), Some("3600"));
    assert_eq!(
        task["serviceAccountName"].as_str(),
        Some("dgem-bench@demo-proj.iam.gserviceaccount.com")
    );
    let c = &task["containers"][0];
    assert_eq!(
        c["image"].as_str(),
        Some(format!("{IMAGE}@{DIGEST}").as_str())
    );
    assert_eq!(c["resources"]["limits"]["cpu"].as_str(), Some("4"));
    assert_eq!(c["resources"]["limits"]["memory"].as_str(), Some("4Gi"));
    assert_eq!(c["env"][0]["name"].as_str(), Some("DGEM_THREADS"));
    assert_eq!(c["env"][0]["value"].as_str(), Some("4"));
    // Cloud Run expands nothing in args: the shard comes from the task's own
    // variables through sh, never as a number written into the manifest.
    assert_eq!(c["command"][0].as_str(), Some("/bin/sh"));
    assert_eq!(c["args"][0].as_str(), Some("-c"));
    let line = s(&c["args"][1], "args[1]");
    assert_eq!(
        line,
        "mkdir -p /results/bench-test && exec dgem bench \
         --shard \"$CLOUD_RUN_TASK_INDEX/$CLOUD_RUN_TASK_COUNT\" \
         --dataset data/eval_dataset.jsonl --resume \
         -o \"/results/bench-test/bench-shard-$CLOUD_RUN_TASK_INDEX.json\""
    );
    // The results folder is the bucket, writable, owned by the image's user.
    assert_eq!(c["volumeMounts"][0]["name"].as_str(), Some("results"));
    assert_eq!(c["volumeMounts"][0]["mountPath"].as_str(), Some("/results"));
    let v = &task["volumes"][0];
    assert_eq!(v["name"].as_str(), Some("results"));
    assert_eq!(
        v["csi"]["driver"].as_str(),
        Some("gcsfuse.run.googleapis.com")
    );
    assert_eq!(v["csi"]["readOnly"].as_bool(), Some(false));
    assert_eq!(
        v["csi"]["volumeAttributes"]["bucketName"].as_str(),
        Some("dgem-bench-demo-proj")
    );
    assert_eq!(
        v["csi"]["volumeAttributes"]["mountOptions"].as_str(),
        Some("uid=10001,gid=10001,implicit-dirs")
    );

    // Task 2 of 4, as Cloud Run starts it.
    let (argv, results) = run_task_line(
        line,
        "cloudrun-task",
        &[("CLOUD_RUN_TASK_INDEX", "2"), ("CLOUD_RUN_TASK_COUNT", "4")],
    );
    let receipt = results.join("bench-test/bench-shard-2.json");
    assert_eq!(
        argv,
        [
            "bench",
            "--shard",
            "2/4",
            "--dataset",
            "data/eval_dataset.jsonl",
            "--resume",
            "-o",
            receipt.to_str().expect("utf-8 path"),
        ]
    );
    assert!(
        results.join("bench-test").is_dir(),
        "the run's folder is made first"
    );
    let _ = std::fs::remove_dir_all(results.parent().expect("temp dir"));
}

#[test]
fn settings_reach_the_cloud_run_job() {
    let docs = render(
        &[],
        &[
            ("SUITE", "bench-intents"),
            ("TASKS", "6"),
            ("PARALLELISM", "2"),
            ("CPU", "8"),
            ("MEMORY", "8Gi"),
            ("MAX_RETRIES", "1"),
            ("TASK_TIMEOUT", "7200"),
            ("RUN_ID", "nightly-1"),
            ("BUCKET", "my-results"),
        ],
    );
    let exec = &docs[0]["spec"]["template"]["spec"];
    assert_eq!(
        (exec["taskCount"].as_i64(), exec["parallelism"].as_i64()),
        (Some(6), Some(2))
    );
    let task = &exec["template"]["spec"];
    assert_eq!(task["maxRetries"].as_i64(), Some(1));
    assert_eq!(task["timeoutSeconds"].as_str(), Some("7200"));
    let c = &task["containers"][0];
    assert_eq!(c["resources"]["limits"]["cpu"].as_str(), Some("8"));
    assert_eq!(c["resources"]["limits"]["memory"].as_str(), Some("8Gi"));
    assert_eq!(
        docs[0]["metadata"]["name"].as_str(),
        Some("dgem-bench-intents")
    );
    let line = s(&c["args"][1], "args[1]");
    assert!(
        line.contains("exec dgem bench-intents --shard \"$CLOUD_RUN_TASK_INDEX/$CLOUD_RUN_TASK_COUNT\" --dataset data/intents/banking77_eval.jsonl --resume -o \"/results/nightly-1/bench-intents-shard-$CLOUD_RUN_TASK_INDEX.json\""),
        "{line}"
    );
    assert_eq!(
        task["volumes"][0]["csi"]["volumeAttributes"]["bucketName"].as_str(),
        Some("my-results")
    );
}

#[test]
fn each_suite_defaults_to_a_dataset_the_image_carries() {
    // The image copies data/ into its working directory, so a path that exists
    // here exists in the container.
    for (suite, dataset) in [
        ("bench", "data/eval_dataset.jsonl"),
        ("bench-calibration", "data/eval_dataset.jsonl"),
        ("bench-intents", "data/intents/banking77_eval.jsonl"),
        ("bench-rerank", "data/rerank_suite.jsonl"),
        ("bench-permutation", "data/permutation_suite.jsonl"),
    ] {
        let docs = render(&[], &[("SUITE", suite)]);
        let c = &docs[0]["spec"]["template"]["spec"]["template"]["spec"]["containers"][0];
        let line = s(&c["args"][1], "args[1]");
        assert!(
            line.contains(&format!("exec dgem {suite} --shard ")),
            "{line}"
        );
        assert!(line.contains(&format!("--dataset {dataset} ")), "{line}");
        assert!(repo_root().join(dataset).is_file(), "{dataset}");
    }
}

#[test]
fn k8s_indexed_job_counts_its_shards_and_runs_non_root() {
    let docs = render(&["--k8s"], &[]);
    assert_eq!(docs.len(), 2, "a claim and a Job");
    let pvc = &docs[0];
    assert_eq!(pvc["kind"].as_str(), Some("PersistentVolumeClaim"));
    assert_eq!(pvc["metadata"]["name"].as_str(), Some("dgem-bench-results"));
    assert_eq!(
        pvc["spec"]["accessModes"][0].as_str(),
        Some("ReadWriteMany")
    );
    assert_eq!(
        pvc["spec"]["storageClassName"].as_str(),
        Some("standard-rwx")
    );
    assert_eq!(
        pvc["spec"]["resources"]["requests"]["storage"].as_str(),
        Some("1Gi")
    );
    let job = &docs[1];
    assert_eq!(job["apiVersion"].as_str(), Some("batch/v1"));
    assert_eq!(job["kind"].as_str(), Some("Job"));
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"].as_str(), Some("Indexed"));
    assert_eq!(spec["completions"].as_i64(), Some(4));
    assert_eq!(spec["parallelism"].as_i64(), Some(4));
    assert_eq!(spec["backoffLimitPerIndex"].as_i64(), Some(3));
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"].as_str(), Some("Never"));
    assert_eq!(pod["activeDeadlineSeconds"].as_i64(), Some(3600));
    let sc = &pod["securityContext"];
    assert_eq!(sc["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(sc["runAsUser"].as_i64(), Some(10001));
    assert_eq!(sc["runAsGroup"].as_i64(), Some(10001));
    assert_eq!(sc["fsGroup"].as_i64(), Some(10001));
    let c = &pod["containers"][0];
    assert_eq!(
        c["image"].as_str(),
        Some(format!("{IMAGE}@{DIGEST}").as_str())
    );
    assert_eq!(
        c["securityContext"]["allowPrivilegeEscalation"].as_bool(),
        Some(false)
    );
    assert_eq!(
        c["securityContext"]["capabilities"]["drop"][0].as_str(),
        Some("ALL")
    );
    let env = c["env"].as_vec().expect("env");
    let var = |name: &str| {
        env.iter()
            .find(|e| e["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no env {name}"))
    };
    // The index from the downward API; the count repeats .spec.completions.
    assert_eq!(
        var("JOB_COMPLETION_INDEX")["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        Some("metadata.annotations['batch.kubernetes.io/job-completion-index']")
    );
    assert_eq!(var("DGEM_SHARD_COUNT")["value"].as_str(), Some("4"));
    assert_eq!(
        var("DGEM_SHARD_COUNT")["value"]
            .as_str()
            .and_then(|v| v.parse::<i64>().ok()),
        spec["completions"].as_i64()
    );
    assert_eq!(var("DGEM_THREADS")["value"].as_str(), Some("4"));
    assert_eq!(c["resources"]["limits"]["cpu"].as_str(), Some("4"));
    assert_eq!(c["resources"]["requests"]["memory"].as_str(), Some("4Gi"));
    assert_eq!(c["volumeMounts"][0]["mountPath"].as_str(), Some("/results"));
    assert_eq!(
        pod["volumes"][0]["persistentVolumeClaim"]["claimName"].as_str(),
        Some("dgem-bench-results")
    );
    assert_eq!(c["command"][0].as_str(), Some("/bin/sh"));
    assert_eq!(c["command"][1].as_str(), Some("-c"));
    let line = s(&c["args"][0], "args[0]");
    assert_eq!(
        line,
        "mkdir -p /results/bench-test && exec dgem bench \
         --shard \"$(JOB_COMPLETION_INDEX)/$(DGEM_SHARD_COUNT)\" \
         --dataset data/eval_dataset.jsonl --resume \
         -o \"/results/bench-test/bench-shard-$(JOB_COMPLETION_INDEX).json\""
    );

    // Pod 1, as the kubelet starts it: $(NAME) is replaced from the
    // container's env (the index as the downward API gives it), and every
    // reference must be to a variable the container declares.
    let mut expanded = line.to_string();
    for e in env {
        let name = s(&e["name"], "env name");
        let value = match name {
            "JOB_COMPLETION_INDEX" => "1",
            _ => s(&e["value"], "env value"),
        };
        expanded = expanded.replace(&format!("$({name})"), value);
    }
    assert!(
        !expanded.contains("$("),
        "undeclared reference in `{expanded}`"
    );
    let (argv, results) = run_task_line(&expanded, "k8s-pod", &[]);
    let receipt = results.join("bench-test/bench-shard-1.json");
    assert_eq!(
        argv,
        [
            "bench",
            "--shard",
            "1/4",
            "--dataset",
            "data/eval_dataset.jsonl",
            "--resume",
            "-o",
            receipt.to_str().expect("utf-8 path"),
        ]
    );
    let _ = std::fs::remove_dir_all(results.parent().expect("temp dir"));
}

#[test]
fn k8s_counts_follow_the_settings() {
    let docs = render(
        &["--k8s"],
        &[
            ("TASKS", "6"),
            ("PARALLELISM", "3"),
            ("STORAGE_CLASS", "nfs-client"),
        ],
    );
    let spec = &docs[1]["spec"];
    assert_eq!(
        (spec["completions"].as_i64(), spec["parallelism"].as_i64()),
        (Some(6), Some(3))
    );
    let env = spec["template"]["spec"]["containers"][0]["env"]
        .as_vec()
        .expect("env");
    let count = env
        .iter()
        .find(|e| e["name"].as_str() == Some("DGEM_SHARD_COUNT"))
        .and_then(|e| e["value"].as_str());
    assert_eq!(count, Some("6"));
    assert_eq!(
        docs[0]["spec"]["storageClassName"].as_str(),
        Some("nfs-client")
    );
}

/// The text between `<<'EOF_DGEM'\n` and `\nEOF_DGEM\n`.
fn heredoc(out: &str) -> &str {
    let start = out.find("<<'EOF_DGEM'\n").expect("heredoc start") + "<<'EOF_DGEM'\n".len();
    let len = out[start..].find("\nEOF_DGEM\n").expect("heredoc end");
    &out[start..start + len]
}

#[test]
fn cloud_run_dry_run_replaces_executes_then_merges_and_writes_nothing() {
    let out_dir = absent_dir("cloudrun-dry");
    let o = out_dir.display().to_string();
    let run = script(&["--dry-run"], &[("OUT_DIR", o.as_str())]);
    let out = &run.stdout;
    assert!(!out_dir.exists(), "a dry run wrote {o}");
    // The job YAML is printed as the command that writes it, and is exactly
    // what --render gives.
    let yaml = format!("{o}/bench-job-dgem-bench.yaml");
    assert!(
        out.contains(&format!("mkdir -p {o} && cat >{yaml} <<'EOF_DGEM'\n")),
        "{out}"
    );
    let rendered = script(&["--render"], &[]).stdout;
    assert_eq!(format!("{}\n", heredoc(out)), rendered);
    // The commands after the heredoc, in order.
    let commands: Vec<&str> = out
        .split("\nEOF_DGEM\n")
        .nth(1)
        .expect("after the YAML")
        .lines()
        .collect();
    let local = format!("{o}/bench/bench-test");
    let gs = "gs://dgem-bench-demo-proj/bench-test";
    let remote: Vec<String> = (0..4)
        .map(|i| format!("{gs}/bench-shard-{i}.json"))
        .collect();
    let receipts: Vec<String> = (0..4)
        .map(|i| format!("{local}/bench-shard-{i}.json"))
        .collect();
    assert_eq!(
        commands,
        [
            format!("gcloud run jobs replace {yaml} --project demo-proj --region us-central1"),
            "gcloud run jobs execute dgem-bench --project demo-proj --region us-central1 --wait"
                .to_string(),
            format!("mkdir -p {local}"),
            format!(
                "gcloud storage cp {} {local}/ --project demo-proj",
                remote.join(" ")
            ),
            format!(
                "dgem bench-merge {} -o {local}/bench-merged.json",
                receipts.join(" ")
            ),
        ]
    );
    // Before the YAML: the bucket, the job's identity and its right to write.
    let before: Vec<&str> = out
        .split("\nmkdir -p ")
        .next()
        .expect("head")
        .lines()
        .collect();
    assert_eq!(
        before,
        [
            "gcloud storage buckets create gs://dgem-bench-demo-proj --project demo-proj --location us-central1 --uniform-bucket-level-access",
            "gcloud iam service-accounts create dgem-bench --project demo-proj --display-name 'dgem bench jobs'",
            "gcloud storage buckets add-iam-policy-binding gs://dgem-bench-demo-proj --project demo-proj --member=serviceAccount:dgem-bench@demo-proj.iam.gserviceaccount.com --role=roles/storage.objectAdmin",
        ]
    );
}

#[test]
fn k8s_dry_run_applies_waits_then_merges_on_the_claim() {
    let out_dir = absent_dir("k8s-dry");
    let o = out_dir.display().to_string();
    // No PROJECT needed when the image is named.
    let run = run_script(
        SCRIPT,
        &["--k8s", "--dry-run"],
        &[
            ("TAG", "test"),
            ("IMAGE", "registry.example/dgem-cpu:1"),
            ("TASKS", "3"),
            ("OUT_DIR", o.as_str()),
        ],
    )
    .expect("bash runs");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out = &run.stdout;
    assert!(!out_dir.exists(), "a dry run wrote {o}");
    assert!(
        out.starts_with("kubectl apply -f - <<'EOF_DGEM'\n"),
        "{out}"
    );
    let docs = YamlLoader::load_from_str(heredoc(out)).expect("the applied manifest");
    assert_eq!(docs[1]["spec"]["completions"].as_i64(), Some(3));
    assert_eq!(
        docs[1]["spec"]["template"]["spec"]["containers"][0]["image"].as_str(),
        Some("registry.example/dgem-cpu:1")
    );
    let commands: Vec<&str> = out
        .split("\nEOF_DGEM\n")
        .nth(1)
        .expect("after the manifest")
        .lines()
        .collect();
    assert_eq!(commands.len(), 2, "{commands:?}");
    // 3 shards in one round, 4 tries each of at most 3600 s.
    assert_eq!(
        commands[0],
        "kubectl wait --for=condition=complete job/dgem-bench --timeout=14400s"
    );
    let (head, overrides) = commands[1]
        .split_once(" '--overrides=")
        .expect("an --overrides word");
    assert_eq!(
        head,
        "kubectl run dgem-bench-merge --image=registry.example/dgem-cpu:1 --restart=Never --attach --rm --quiet --pod-running-timeout=10m"
    );
    let json = overrides.strip_suffix('\'').expect("single-quoted");
    // JSON is YAML: read the pod spec the merge runs with.
    let pod = &YamlLoader::load_from_str(json).expect("overrides JSON")[0]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(pod["securityContext"]["runAsUser"].as_i64(), Some(10001));
    let c = &pod["containers"][0];
    assert_eq!(c["name"].as_str(), Some("dgem-bench-merge"));
    assert_eq!(c["command"][0].as_str(), Some("/usr/local/bin/dgem"));
    let args: Vec<&str> = c["args"]
        .as_vec()
        .expect("args")
        .iter()
        .map(|a| s(a, "arg"))
        .collect();
    assert_eq!(
        args,
        [
            "bench-merge",
            "/results/bench-test/bench-shard-0.json",
            "/results/bench-test/bench-shard-1.json",
            "/results/bench-test/bench-shard-2.json",
            "-o",
            "/results/bench-test/bench-merged.json"
        ]
    );
    assert_eq!(
        pod["volumes"][0]["persistentVolumeClaim"]["claimName"].as_str(),
        Some("dgem-bench-results")
    );
    assert_eq!(c["volumeMounts"][0]["mountPath"].as_str(), Some("/results"));
}

/// Arguments, environment, expected stderr.
type ErrCase<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);

#[test]
fn bad_settings_exit_1_before_anything_runs() {
    let cases: [ErrCase<'_>; 7] = [
        (
            &["--dry-run"],
            &[("TASKS", "0")],
            "error: `TASKS` must be a whole number from 1 to 10000. Given: `0`",
        ),
        (
            &["--dry-run"],
            &[("TASKS", "4"), ("PARALLELISM", "5")],
            "error: `PARALLELISM` must be a whole number from 1 to 4. Given: `5`",
        ),
        (
            &["--dry-run"],
            &[("SUITE", "bench-compare")],
            "error: `SUITE` must be one of [bench, bench-calibration, bench-intents, bench-rerank, bench-permutation, batch]. Given: `bench-compare`",
        ),
        (
            &["--dry-run"],
            &[("DATASET", "data/x y.jsonl")],
            "error: `DATASET` must be a dataset path made of letters, digits and _./-. Given: `data/x y.jsonl`",
        ),
        (
            &["--dry-run"],
            &[("MEMORY", "4G")],
            "error: `MEMORY` must be a size such as 512Mi or 4Gi. Given: `4G`",
        ),
        (
            &["--bogus"],
            &[],
            "error: unknown argument `--bogus`; allowed: --dry-run, --render, --k8s, --help",
        ),
        (
            &["--dry-run"],
            &[("PROJECT", "")],
            "error: `PROJECT` must be set",
        ),
    ];
    for (args, extra, want) in cases {
        let run = run_script(SCRIPT, args, &env_for(extra)).expect("runs");
        assert_eq!(run.code, 1, "{args:?} {extra:?}: {}", run.stderr);
        assert!(run.stderr.contains(want), "{extra:?}: {}", run.stderr);
        assert!(run.stdout.is_empty(), "{extra:?} ran on: {}", run.stdout);
    }
}

/// `SUITE=batch`: the settings of a `dgem batch` job.
const BATCH: [(&str, &str); 2] = [("SUITE", "batch"), ("INPUT", "inputs/tickets.jsonl")];

#[test]
fn batch_cloud_run_job_decides_one_shard_of_the_input_per_task() {
    let docs = render(&[], &BATCH);
    let y = &docs[0];
    assert_eq!(y["metadata"]["name"].as_str(), Some("dgem-batch"));
    let exec = &y["spec"]["template"]["spec"];
    assert_eq!(exec["taskCount"].as_i64(), Some(4));
    let c = &exec["template"]["spec"]["containers"][0];
    let line = s(&c["args"][1], "args[1]");
    assert_eq!(
        line,
        "mkdir -p /results/batch-test && exec dgem batch \
         --shard \"$CLOUD_RUN_TASK_INDEX/$CLOUD_RUN_TASK_COUNT\" \
         -t support_triage -i \"/results/inputs/tickets.jsonl\" \
         -o \"/results/batch-test/batch-shard-$CLOUD_RUN_TASK_INDEX.jsonl\""
    );
    // The input and the outputs share the bucket, writable.
    let v = &exec["template"]["spec"]["volumes"][0];
    assert_eq!(v["csi"]["readOnly"].as_bool(), Some(false));
    let (argv, results) = run_task_line(
        line,
        "cloudrun-batch-task",
        &[("CLOUD_RUN_TASK_INDEX", "1"), ("CLOUD_RUN_TASK_COUNT", "4")],
    );
    let input = results.join("inputs/tickets.jsonl");
    let output = results.join("batch-test/batch-shard-1.jsonl");
    assert_eq!(
        argv,
        [
            "batch",
            "--shard",
            "1/4",
            "-t",
            "support_triage",
            "-i",
            input.to_str().expect("utf-8 path"),
            "-o",
            output.to_str().expect("utf-8 path"),
        ]
    );
    let _ = std::fs::remove_dir_all(results.parent().expect("temp dir"));
}

#[test]
fn batch_k8s_job_names_each_pod_its_shard() {
    let docs = render(&["--k8s"], &[("POLICY", "code_review"), BATCH[0], BATCH[1]]);
    let job = &docs[1];
    assert_eq!(job["metadata"]["name"].as_str(), Some("dgem-batch"));
    assert_eq!(job["spec"]["completionMode"].as_str(), Some("Indexed"));
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    let line = s(&c["args"][0], "args[0]");
    let mut expanded = line.to_string();
    for e in c["env"].as_vec().expect("env") {
        let name = s(&e["name"], "env name");
        let value = match name {
            "JOB_COMPLETION_INDEX" => "3",
            _ => s(&e["value"], "env value"),
        };
        expanded = expanded.replace(&format!("$({name})"), value);
    }
    assert!(
        !expanded.contains("$("),
        "undeclared reference in `{expanded}`"
    );
    let (argv, results) = run_task_line(&expanded, "k8s-batch-pod", &[]);
    assert_eq!(&argv[..5], ["batch", "--shard", "3/4", "-t", "code_review"]);
    let output = results.join("batch-test/batch-shard-3.jsonl");
    assert_eq!(argv[8], output.to_str().expect("utf-8 path"));
    let _ = std::fs::remove_dir_all(results.parent().expect("temp dir"));
}

#[test]
fn batch_dry_run_merges_the_shard_outputs_with_batch_merge() {
    let out_dir = absent_dir("batch-dry");
    let o = out_dir.display().to_string();
    let mut env = BATCH.to_vec();
    env.push(("OUT_DIR", o.as_str()));
    let out = script(&["--dry-run"], &env).stdout;
    let local = format!("{o}/bench/batch-test");
    let parts: Vec<String> = (0..4)
        .map(|i| format!("{local}/batch-shard-{i}.jsonl"))
        .collect();
    let last = out.lines().last().expect("a merge line");
    assert_eq!(
        last,
        format!(
            "dgem batch-merge {} --overwrite -o {local}/batch-merged.jsonl",
            parts.join(" ")
        )
    );
    // Without INPUT there is nothing to decide: refused before anything runs.
    let run =
        run_script(SCRIPT, &["--render"], &env_for(&[("SUITE", "batch")])).expect("bash runs");
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("`INPUT` must be set"), "{}", run.stderr);
    let run = run_script(
        SCRIPT,
        &["--render"],
        &env_for(&[("SUITE", "batch"), ("INPUT", "../etc/passwd")]),
    )
    .expect("bash runs");
    assert_eq!(run.code, 1, "{}", run.stdout);
}
