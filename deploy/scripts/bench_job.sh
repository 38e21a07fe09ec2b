#!/usr/bin/env bash
# Run one bench harness as a sharded batch job on the CPU image and merge the
# shards' receipts into one; with SUITE=batch, decide every row of INPUT (a
# JSON Lines, CSV or OpenAI Batch file in the results bucket or claim) under
# POLICY with `dgem batch` and merge the shards' outputs with `dgem batch-merge`.
#
#   PROJECT=my-proj [SUITE=bench] [TASKS=4] deploy/scripts/bench_job.sh [--dry-run] [--render] [--k8s]
#   PROJECT=my-proj SUITE=batch INPUT=inputs/tickets.jsonl [POLICY=support_triage] deploy/scripts/bench_job.sh
#
# Cloud Run (default): renders deploy/jobs/cloudrun-bench-job.yaml, creates the
# results bucket and the job's service account if missing, runs
# `gcloud run jobs replace`, `gcloud run jobs execute --wait`, copies the
# receipts down to $OUT_DIR/bench/$RUN_ID and runs `dgem bench-merge` on them.
# --k8s: renders deploy/jobs/k8s-bench-indexed-job.yaml into `kubectl apply -f -`
# (current kubectl context), waits for the Job and merges in a short pod.
# --render prints the manifest and exits. Settings: docs/deploy.md.
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() { sed -n '2,16p' "${BASH_SOURCE[0]}"; }

RENDER=0
TARGET=cloudrun
while (($#)); do
  case "$1" in
    --dry-run) DRY_RUN=1 ;;
    --render) RENDER=1 ;;
    --k8s) TARGET=k8s ;;
    -h | --help)
      usage
      exit 0
      ;;
    *)
      echo "error: unknown argument \`$1\`; allowed: --dry-run, --render, --k8s, --help" >&2
      exit 1
      ;;
  esac
  shift
done

# Fail (exit 1) unless variable $1 matches the regular expression $2; $3 says
# in words what is allowed.
check() {
  if [[ ! "${!1}" =~ $2 ]]; then
    echo "error: \`$1\` must be $3. Given: \`${!1}\`" >&2
    exit 1
  fi
}

# A whole number from $2 to $3 in variable $1.
check_range() {
  check "$1" '^[0-9]{1,9}$' "a whole number from $2 to $3"
  if ((10#${!1} < $2 || 10#${!1} > $3)); then
    echo "error: \`$1\` must be a whole number from $2 to $3. Given: \`${!1}\`" >&2
    exit 1
  fi
}

SUITE="${SUITE:-bench}"
case "$SUITE" in
  bench | bench-calibration) default_dataset=data/eval_dataset.jsonl ;;
  bench-intents) default_dataset=data/intents/banking77_eval.jsonl ;;
  bench-rerank) default_dataset=data/rerank_suite.jsonl ;;
  bench-permutation) default_dataset=data/permutation_suite.jsonl ;;
  batch) default_dataset=unused ;;
  *)
    echo "error: \`SUITE\` must be one of [bench, bench-calibration, bench-intents, bench-rerank, bench-permutation, batch]. Given: \`$SUITE\`" >&2
    exit 1
    ;;
esac
# The image's working directory is /opt/dgem, where data/ is copied.
DATASET="${DATASET:-$default_dataset}"
TASKS="${TASKS:-4}"
PARALLELISM="${PARALLELISM:-$TASKS}"
CPU="${CPU:-4}"
MEMORY="${MEMORY:-4Gi}"
MAX_RETRIES="${MAX_RETRIES:-3}"
TASK_TIMEOUT="${TASK_TIMEOUT:-3600}"
REGION="${REGION:-us-central1}"
TAG="${TAG:-$(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo dev)}"
RUN_ID="${RUN_ID:-$SUITE-$TAG}"
JOB="${JOB:-dgem-$SUITE}"
OUT_DIR="${OUT_DIR:-$DEPLOY_DIR/out}"

check_range TASKS 1 10000
check_range PARALLELISM 1 "$TASKS"
check_range CPU 1 64
check_range MAX_RETRIES 0 10
check_range TASK_TIMEOUT 1 86400
check MEMORY '^[1-9][0-9]*(Mi|Gi)$' 'a size such as 512Mi or 4Gi'
check DATASET '^[A-Za-z0-9_./-]+$' 'a dataset path made of letters, digits and _./-'
check RUN_ID '^[A-Za-z0-9][A-Za-z0-9_.-]*$' 'letters, digits and _.- (a folder name)'
check JOB '^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$' 'a job name: lower-case letters, digits and -, starting with a letter'
# `dgem batch`: the rows (a path inside the bucket or claim, mounted at
# /results) and the policy they are decided under; shard outputs are JSON
# Lines, merged in input order.
KIND="bench"
EXT=json
MERGE=bench-merge
if [[ "$SUITE" == batch ]]; then
  KIND="batch"
  EXT=jsonl
  MERGE=batch-merge
  require INPUT
  POLICY="${POLICY:-support_triage}"
  check INPUT '^[A-Za-z0-9_][A-Za-z0-9_./-]*$' 'a path inside the bucket made of letters, digits and _./- (no leading / or ..)'
  if [[ "$INPUT" == *..* ]]; then
    echo "error: \`INPUT\` must be a path inside the bucket without \`..\`. Given: \`$INPUT\`" >&2
    exit 1
  fi
  check POLICY '^[A-Za-z0-9_][A-Za-z0-9_./-]*$' 'a built-in policy name or a path in the image made of letters, digits and _./-'
fi

if [[ "$TARGET" == cloudrun ]]; then
  require PROJECT
  BUCKET="${BUCKET:-dgem-bench-$PROJECT}"
  SERVICE_ACCOUNT="${SERVICE_ACCOUNT:-dgem-bench@$PROJECT.iam.gserviceaccount.com}"
  check BUCKET '^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$' 'a bucket name (no gs://)'
else
  PVC="${PVC:-dgem-bench-results}"
  STORAGE_CLASS="${STORAGE_CLASS:-standard-rwx}"
  RESULTS_SIZE="${RESULTS_SIZE:-1Gi}"
  check PVC '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$' 'a claim name: lower-case letters, digits and -'
  check STORAGE_CLASS '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$' 'a storage class name'
  check RESULTS_SIZE '^[1-9][0-9]*(Mi|Gi|Ti)$' 'a size such as 1Gi'
fi

# The image, pinned by digest so that every task runs the same build: IMAGE as
# given when it already has a digest, else IMAGE_DIGEST, else (Cloud Run)
# Artifact Registry is asked for the tag's digest.
if [[ -z "${IMAGE:-}" ]]; then
  require PROJECT
  IMAGE="$REGION-docker.pkg.dev/$PROJECT/${AR_REPO:-dgem}/${IMAGE_NAME:-dgem-cpu}:$TAG"
fi
if [[ "$IMAGE" == *@sha256:* ]]; then
  PINNED_IMAGE="$IMAGE"
elif [[ "$TARGET" == k8s && -z "${IMAGE_DIGEST:-}" ]]; then
  PINNED_IMAGE="$IMAGE"
else
  PINNED_IMAGE="$(pinned_image)"
fi
# Read through ${!name} in render().
# shellcheck disable=SC2034
IMAGE="$PINNED_IMAGE"

# Receipt file names, one per shard index, in index order.
receipts() {
  local prefix="$1" i
  for ((i = 0; i < TASKS; i++)); do
    echo "$prefix/$SUITE-shard-$i.$EXT"
  done
}

# Replace each ${NAME} of template $1 with the variable's value; any
# placeholder left outside a comment means the template and this script
# disagree, which is an internal failure.
render() {
  local text name left
  text="$(<"$DEPLOY_DIR/jobs/$1")"
  for name in JOB REGION TASKS PARALLELISM SERVICE_ACCOUNT MAX_RETRIES TASK_TIMEOUT \
    IMAGE SUITE DATASET RUN_ID CPU MEMORY BUCKET PVC STORAGE_CLASS RESULTS_SIZE POLICY INPUT; do
    [[ -n "${!name:-}" ]] || continue
    text="${text//"\${$name}"/${!name}}"
  done
  left="$(grep -v '^[[:space:]]*#' <<<"$text" | grep -oE '\$\{[A-Z_]+\}' | sort -u | paste -sd' ' - || true)"
  if [[ -n "$left" ]]; then
    echo "error: $1 has placeholders this script does not fill: $left" >&2
    exit 2
  fi
  printf '%s\n' "$text"
}

render_cloudrun() { render "cloudrun-$KIND-job.yaml"; }
render_k8s() { render "k8s-$KIND-indexed-job.yaml"; }

if [[ "$RENDER" == 1 ]]; then
  if [[ "$TARGET" == k8s ]]; then render_k8s; else render_cloudrun; fi
  exit 0
fi

if [[ "$TARGET" == k8s ]]; then
  if [[ "$DRY_RUN" == 1 ]]; then
    # Pasting these lines applies the manifest shown.
    echo "kubectl apply -f - <<'EOF_DGEM'"
    render_k8s
    echo "EOF_DGEM"
  else
    render_k8s | run kubectl apply -f -
  fi
  # Long enough for every round of pods to use all of its retries.
  rounds=$(((TASKS + PARALLELISM - 1) / PARALLELISM))
  run kubectl wait --for=condition=complete "job/$JOB" "--timeout=$((TASK_TIMEOUT * (MAX_RETRIES + 1) * rounds))s"
  # Merge on the claim itself, in a pod that mounts it and is deleted when done:
  # the merged receipt stays on the claim, the report is printed here.
  args_json="\"$MERGE\""
  while IFS= read -r f; do
    args_json+=",\"$f\""
  done < <(receipts "/results/$RUN_ID")
  if [[ "$SUITE" == batch ]]; then
    args_json+=",\"--overwrite\""
  fi
  args_json+=",\"-o\",\"/results/$RUN_ID/$SUITE-merged.$EXT\""
  overrides="{\"spec\":{\"securityContext\":{\"runAsNonRoot\":true,\"runAsUser\":10001,\"runAsGroup\":10001},\"containers\":[{\"name\":\"$JOB-merge\",\"image\":\"$PINNED_IMAGE\",\"command\":[\"/usr/local/bin/dgem\"],\"args\":[$args_json],\"volumeMounts\":[{\"name\":\"results\",\"mountPath\":\"/results\"}]}],\"volumes\":[{\"name\":\"results\",\"persistentVolumeClaim\":{\"claimName\":\"$PVC\"}}]}}"
  run kubectl run "$JOB-merge" "--image=$PINNED_IMAGE" --restart=Never --attach --rm --quiet \
    --pod-running-timeout=10m "--overrides=$overrides"
  exit 0
fi

# Cloud Run: a bucket for the receipts and an identity that may write to it.
if [[ "$DRY_RUN" == 1 ]] || ! gcloud storage buckets describe "gs://$BUCKET" --project "$PROJECT" >/dev/null 2>&1; then
  run gcloud storage buckets create "gs://$BUCKET" --project "$PROJECT" --location "$REGION" \
    --uniform-bucket-level-access
fi
if [[ "$DRY_RUN" == 1 ]] || ! gcloud iam service-accounts describe "$SERVICE_ACCOUNT" --project "$PROJECT" >/dev/null 2>&1; then
  run gcloud iam service-accounts create "${SERVICE_ACCOUNT%%@*}" --project "$PROJECT" \
    --display-name "dgem bench jobs"
fi
run gcloud storage buckets add-iam-policy-binding "gs://$BUCKET" --project "$PROJECT" \
  "--member=serviceAccount:$SERVICE_ACCOUNT" --role=roles/storage.objectAdmin

yaml="$OUT_DIR/bench-job-$JOB.yaml"
if [[ "$DRY_RUN" == 1 ]]; then
  # A dry run writes nothing: print the file as a pasteable command instead.
  render_cloudrun | print_write "$yaml"
else
  yaml_dir="$(dirname "$yaml")"
  mkdir -p "$yaml_dir"
  render_cloudrun >"$yaml"
fi
run gcloud run jobs replace "$yaml" --project "$PROJECT" --region "$REGION"
run gcloud run jobs execute "$JOB" --project "$PROJECT" --region "$REGION" --wait

local_dir="$OUT_DIR/bench/$RUN_ID"
mapfile -t remote < <(receipts "gs://$BUCKET/$RUN_ID")
mapfile -t local_files < <(receipts "$local_dir")
merge_flags=()
if [[ "$SUITE" == batch ]]; then
  # batch-merge reads each part's sidecar (the run finished; its row
  # counts and run), and a rerun of this RUN_ID merges again.
  mapfile -t -O "${#remote[@]}" remote < <(receipts "gs://$BUCKET/$RUN_ID" | sed 's/$/.batch.json/')
  merge_flags=(--overwrite)
fi
run mkdir -p "$local_dir"
run gcloud storage cp "${remote[@]}" "$local_dir/" --project "$PROJECT"
run "${DGEM:-dgem}" "$MERGE" "${local_files[@]}" "${merge_flags[@]}" -o "$local_dir/$SUITE-merged.$EXT"
