#!/usr/bin/env bash
# Build the serving image (deploy/Dockerfile) with Cloud Build and push it to
# Artifact Registry, creating the repository if it is missing (serving.md §11).
#
#   PROJECT=my-proj [TAG=...] [VLLM_IMAGE=vllm/vllm-openai@sha256:...] deploy/scripts/build_push.sh [--dry-run]
#
# The vLLM base must be pinned by digest; the placeholder digest in the
# Dockerfile is refused (set VLLM_IMAGE to the digest you validated).
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() { sed -n '2,9p' "${BASH_SOURCE[0]}"; }
parse_common_flags "$@"
set_defaults

default_vllm="$(sed -n 's/^ARG VLLM_IMAGE=//p' "$DEPLOY_DIR/Dockerfile")"
VLLM_IMAGE="${VLLM_IMAGE:-$default_vllm}"
if [[ ! "$VLLM_IMAGE" =~ @sha256:[0-9a-f]{64}$ ]]; then
  echo "error: \`VLLM_IMAGE\` must be pinned by digest (IMAGE@sha256:<64 hex>). Given: \`$VLLM_IMAGE\`" >&2
  exit 1
fi
if [[ "$VLLM_IMAGE" == *@sha256:0000000000000000000000000000000000000000000000000000000000000000 && "$DRY_RUN" != 1 ]]; then
  echo "error: \`VLLM_IMAGE\` is the placeholder digest; set it to the vLLM image you validated" >&2
  exit 1
fi

if [[ "$DRY_RUN" == 1 ]] || ! gcloud artifacts repositories describe "$AR_REPO" --project "$PROJECT" --location "$REGION" >/dev/null 2>&1; then
  run gcloud artifacts repositories create "$AR_REPO" --project "$PROJECT" --location "$REGION" \
    --repository-format docker --description "dgem serving images"
fi
run gcloud builds submit "$REPO_ROOT" --project "$PROJECT" --region "$REGION" \
  --config "$DEPLOY_DIR/cloudbuild.yaml" \
  "--substitutions=_IMAGE=$IMAGE,_VLLM_IMAGE=$VLLM_IMAGE,_REVISION=$TAG" \
  --machine-type e2-highcpu-32 --timeout 3600s
