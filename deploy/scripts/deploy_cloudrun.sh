#!/usr/bin/env bash
# Deploy the serving image to Cloud Run with one GPU (serving.md §12.1).
#
#   PROJECT=my-proj TIER=rtxpro6000 deploy/scripts/deploy_cloudrun.sh [--dry-run] [--render] [--yaml]
#
# TIER: rtxpro6000 (default; 20 vCPU / 80 GiB, tmpfs staging) or l4 (8 vCPU /
# 32 GiB, FUSE streaming, vision off). --render prints the service YAML and
# exits; --yaml deploys that YAML with `gcloud run services replace` instead of
# flags. HF_TOKEN_SECRET names a Secret Manager secret exposed as HF_TOKEN.
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/cloudrun_profile.sh"

usage() { sed -n '2,10p' "${BASH_SOURCE[0]}"; }

RENDER=0
VIA_YAML=0
while (($#)); do
  case "$1" in
    --dry-run) DRY_RUN=1 ;;
    --render) RENDER=1 ;;
    --yaml) VIA_YAML=1 ;;
    -h | --help)
      usage
      exit 0
      ;;
    *)
      echo "error: unknown argument \`$1\`; allowed: --dry-run, --render, --yaml, --help" >&2
      exit 1
      ;;
  esac
  shift
done

set_defaults
cloudrun_profile
PINNED_IMAGE="$(pinned_image)"
export PINNED_IMAGE

# Render the service YAML template: replace each ${NAME} with its value.
render_yaml() {
  local text name line env_yaml=""
  while IFS= read -r line; do
    env_yaml+="            - name: ${line%%=*}"$'\n'"              value: '${line#*=}'"$'\n'
  done < <(cloudrun_env)
  if [[ -n "${HF_TOKEN_SECRET:-}" ]]; then
    env_yaml+="            - name: HF_TOKEN"$'\n'"              valueFrom:"$'\n'"                secretKeyRef:"$'\n'"                  name: ${HF_TOKEN_SECRET}"$'\n'"                  key: latest"$'\n'
  fi
  # Read through ${!name} below.
  # shellcheck disable=SC2034
  ENV_YAML="${env_yaml%$'\n'}"
  text="$(<"$DEPLOY_DIR/cloudrun/service.yaml.tmpl")"
  for name in SERVICE MIN_INSTANCES MAX_INSTANCES SERVICE_ACCOUNT CONCURRENCY GPU_TYPE \
    PINNED_IMAGE PORT ENV_YAML CPU MEMORY PROBE_PATH PROBE_INITIAL_DELAY PROBE_PERIOD \
    PROBE_TIMEOUT PROBE_FAILURES BUCKET; do
    text="${text//"\${$name}"/${!name}}"
  done
  printf '%s\n' "$text"
}

if [[ "$RENDER" == 1 ]]; then
  render_yaml
  exit 0
fi

if [[ "$VIA_YAML" == 1 ]]; then
  out="${OUT_DIR:-$DEPLOY_DIR/out}/service-${TIER:-rtxpro6000}.yaml"
  if [[ "$DRY_RUN" == 1 ]]; then
    # Print the file as a pasteable command instead of writing it.
    render_yaml | print_write "$out"
  else
    out_dir="$(dirname "$out")"
    mkdir -p "$out_dir"
    render_yaml >"$out"
  fi
  run gcloud beta run services replace "$out" --project "$PROJECT" --region "$REGION"
  exit 0
fi

env_csv="$(cloudrun_env | paste -sd, -)"
# Commas inside gcloud flag values are intended.
# shellcheck disable=SC2054
args=(
  gcloud beta run deploy "$SERVICE"
  --project "$PROJECT" --region "$REGION"
  --image "$PINNED_IMAGE"
  --service-account "$SERVICE_ACCOUNT"
  --execution-environment gen2 --no-allow-unauthenticated
  --cpu "$CPU" --memory "$MEMORY" --gpu 1 --gpu-type "$GPU_TYPE" --no-gpu-zonal-redundancy
  --no-cpu-throttling --min-instances "$MIN_INSTANCES" --max-instances "$MAX_INSTANCES"
  --concurrency "$CONCURRENCY" --port "$PORT"
  "--add-volume=name=weights,type=cloud-storage,bucket=$BUCKET,readonly=true,mount-options=enable-buffered-read=true"
  --add-volume-mount=volume=weights,mount-path=/mnt/gcs
  "--startup-probe=httpGet.path=$PROBE_PATH,httpGet.port=$PORT,initialDelaySeconds=$PROBE_INITIAL_DELAY,periodSeconds=$PROBE_PERIOD,timeoutSeconds=$PROBE_TIMEOUT,failureThreshold=$PROBE_FAILURES"
  --network=default --subnet=default --vpc-egress=all-traffic
  "--set-env-vars=$env_csv"
)
if [[ -n "${HF_TOKEN_SECRET:-}" ]]; then
  args+=("--set-secrets=HF_TOKEN=$HF_TOKEN_SECRET:latest")
fi
run "${args[@]}"
