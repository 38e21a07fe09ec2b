#!/usr/bin/env bash
# Put the model weights in a regional bucket once (serving.md §11 `cloudrun-stage`):
# a Cloud Build step downloads the Hugging Face repo (token from Secret Manager,
# so gated models and rate limits are not a problem) and copies it to
# gs://$BUCKET/$WEIGHTS_PREFIX/. Skipped when config.json is already there.
#
#   PROJECT=my-proj [MODEL_HF=org/repo] [HF_TOKEN_SECRET=dgemma-hf-token] deploy/scripts/stage_weights.sh [--dry-run]
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() { sed -n '2,8p' "${BASH_SOURCE[0]}"; }
parse_common_flags "$@"
set_defaults
MODEL_HF="${MODEL_HF:-nvidia/diffusiongemma-26B-A4B-it-NVFP4}"
HF_TOKEN_SECRET="${HF_TOKEN_SECRET:-dgemma-hf-token}"
dest="gs://$BUCKET/$WEIGHTS_PREFIX"

if [[ "$DRY_RUN" != 1 ]] && gcloud storage objects describe "$dest/config.json" --project "$PROJECT" >/dev/null 2>&1; then
  echo "stage_weights: $dest/config.json exists; nothing to do" >&2
  exit 0
fi
if [[ "$DRY_RUN" == 1 ]] || ! gcloud storage buckets describe "gs://$BUCKET" --project "$PROJECT" >/dev/null 2>&1; then
  run gcloud storage buckets create "gs://$BUCKET" --project "$PROJECT" --location "$REGION" \
    --uniform-bucket-level-access
fi
run gcloud storage buckets add-iam-policy-binding "gs://$BUCKET" --project "$PROJECT" \
  "--member=serviceAccount:$SERVICE_ACCOUNT" --role=roles/storage.objectViewer
step="pip install -q 'huggingface_hub[hf_transfer]' && HF_HUB_ENABLE_HF_TRANSFER=1 python -c \"import os; from huggingface_hub import snapshot_download; snapshot_download('$MODEL_HF', local_dir='/workspace/w', token=os.environ.get('HF_TOKEN'))\" && rm -rf /workspace/w/.cache"
# The step as a JSON string, computed here: a failure inside the heredoc's
# substitution would go unnoticed and leave `args` empty.
step_json=""
if ! step_json="$(printf '%s' "$step" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')" ||
  [[ -z "$step_json" ]]; then
  die "could not quote the Cloud Build step as JSON with python3"
fi
cfg="${OUT_DIR:-$DEPLOY_DIR/out}/stage-weights.cloudbuild.yaml"
cloudbuild_yaml() {
  cat <<YAML
steps:
  - name: python:3.11-slim
    entrypoint: bash
    args: ["-c", $step_json]
    secretEnv: ["HF_TOKEN"]
  - name: gcr.io/google.com/cloudsdktool/cloud-sdk:slim
    args: ["gcloud", "storage", "cp", "-r", "/workspace/w/*", "$dest/"]
availableSecrets:
  secretManager:
    - versionName: projects/$PROJECT/secrets/$HF_TOKEN_SECRET/versions/latest
      env: HF_TOKEN
options:
  machineType: E2_HIGHCPU_8
  diskSizeGb: 100
timeout: 3600s
YAML
}
if [[ "$DRY_RUN" == 1 ]]; then
  # A dry run writes nothing: print the file as a pasteable command instead.
  cloudbuild_yaml | print_write "$cfg"
else
  cfg_dir="$(dirname "$cfg")"
  mkdir -p "$cfg_dir"
  cloudbuild_yaml >"$cfg"
fi
run gcloud builds submit --no-source --project "$PROJECT" --region "$REGION" --config "$cfg"
