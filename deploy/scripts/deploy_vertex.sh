#!/usr/bin/env bash
# Deploy the serving image to a dedicated Vertex AI endpoint (serving.md §12.2,
# v1beta1 REST): upload the model with `invokeRoutePrefix "/*"` and the /health
# route, find or create the dedicated endpoint, deploy with one GPU.
#
#   PROJECT=my-proj VERTEX_PROFILE=g4-rtxpro6000 deploy/scripts/deploy_vertex.sh [--dry-run]
#
# VERTEX_PROFILE: g4-rtxpro6000 (default; g4-standard-48 + NVIDIA_RTX_PRO_6000)
# or g2-l4 (g2-standard-16 + NVIDIA_L4, vision off; g2-standard-8 is OOM-killed).
# The container reads AIP_HTTP_PORT and stages weights from DGEM_WEIGHTS_URI.
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() { sed -n '2,11p' "${BASH_SOURCE[0]}"; }
parse_common_flags "$@"
set_defaults

case "${VERTEX_PROFILE:-g4-rtxpro6000}" in
  g4-rtxpro6000)
    MACHINE=g4-standard-48 ACCEL=NVIDIA_RTX_PRO_6000 DISABLE_MM=0 KV_CACHE_GB=12 MAX_MODEL_LEN=8192
    ENDPOINT_NAME="${ENDPOINT_NAME:-dgemma-dedicated-g4}"
    ;;
  g2-l4)
    MACHINE=g2-standard-16 ACCEL=NVIDIA_L4 DISABLE_MM=1 KV_CACHE_GB=2 MAX_MODEL_LEN=32768
    ENDPOINT_NAME="${ENDPOINT_NAME:-dgemma-dedicated-l4}"
    ;;
  *)
    echo "error: \`VERTEX_PROFILE\` must be one of [g4-rtxpro6000, g2-l4]. Given: \`${VERTEX_PROFILE}\`" >&2
    exit 1
    ;;
esac
MIN_REPLICAS="${MIN_REPLICAS:-1}"
MAX_REPLICAS="${MAX_REPLICAS:-2}"
TRAFFIC="${VERTEX_NEW_TRAFFIC:-100}"
API="https://$REGION-aiplatform.googleapis.com/v1beta1/projects/$PROJECT/locations/$REGION"
PINNED_IMAGE="$(pinned_image)"

model_body() {
  cat <<JSON
{"model": {"displayName": "dgemma", "containerSpec": {"imageUri": "$PINNED_IMAGE", "invokeRoutePrefix": "/*", "healthRoute": "/health", "ports": [{"containerPort": 8080}], "env": [{"name": "DGEM_WEIGHTS_URI", "value": "gs://$BUCKET/$WEIGHTS_PREFIX"}, {"name": "GCS_BUCKET", "value": "$BUCKET"}, {"name": "STAGING", "value": "tmpfs"}, {"name": "CANVAS", "value": "128"}, {"name": "ENFORCE_EAGER", "value": "1"}, {"name": "DISABLE_MM", "value": "$DISABLE_MM"}, {"name": "GPU_UTIL", "value": "0.85"}, {"name": "MAX_MODEL_LEN", "value": "$MAX_MODEL_LEN"}, {"name": "KV_CACHE_GB", "value": "$KV_CACHE_GB"}, {"name": "MAX_SEQS", "value": "32"}, {"name": "MAX_INFLIGHT", "value": "8"}, {"name": "DEFAULT_SAMPLES", "value": "1"}]}}}
JSON
}

endpoint_body() {
  echo "{\"displayName\": \"$ENDPOINT_NAME\", \"dedicatedEndpointEnabled\": true}"
}

deploy_body() {
  local model="$1"
  cat <<JSON
{"deployedModel": {"model": "$model", "displayName": "dgemma", "serviceAccount": "$SERVICE_ACCOUNT", "dedicatedResources": {"machineSpec": {"machineType": "$MACHINE", "acceleratorType": "$ACCEL", "acceleratorCount": 1}, "minReplicaCount": $MIN_REPLICAS, "maxReplicaCount": $MAX_REPLICAS, "autoscalingMetricSpecs": [{"metricName": "aiplatform.googleapis.com/prediction/online/accelerator/duty_cycle", "target": 70}]}}, "trafficSplit": {"0": $TRAFFIC}}
JSON
}

# POST JSON to the v1beta1 API; prints the response body.
post() {
  run curl -sS --fail-with-body -X POST -H "Authorization: Bearer ${ACCESS_TOKEN:-$TOKEN_SUBST}" \
    -H "Content-Type: application/json" "$API/$1" -d "$2"
}

# Field (dotted path) of a JSON document on stdin (python3 is on every gcloud machine).
json_field() {
  python3 -c 'import functools,json,sys; print(functools.reduce(lambda d,k: d.get(k, "") if isinstance(d, dict) else "", sys.argv[1].split("."), json.load(sys.stdin)))' "$1"
}

# Field $2 (dotted path) of the JSON response $1 from step $3 (in words);
# fails (exit 1) naming the step when the response is not JSON or the field is
# missing or empty.
response_field() {
  local value
  if ! value="$(json_field "$2" <<<"$1" 2>/dev/null)"; then
    die "could not $3: the response is not JSON: ${1:0:300}"
  fi
  if [[ -z "$value" ]]; then
    die "could not $3: no \`$2\` in the response: ${1:0:300}"
  fi
  printf '%s\n' "$value"
}

# Poll a long-running operation until done; prints the final JSON. Fails
# (exit 1) naming the operation when polling fails or the operation failed.
wait_op() {
  local op="$1" body done_flag error
  while :; do
    capture body "poll the Vertex AI operation \`$op\`" \
      curl -sS --fail-with-body -H "Authorization: Bearer $ACCESS_TOKEN" "https://$REGION-aiplatform.googleapis.com/v1beta1/$op"
    if ! done_flag="$(json_field "done" <<<"$body" 2>/dev/null)"; then
      die "could not poll the Vertex AI operation \`$op\`: the response is not JSON: ${body:0:300}"
    fi
    if [[ "$done_flag" == True ]]; then
      error="$(json_field error.message <<<"$body")"
      if [[ -n "$error" ]]; then
        die "the Vertex AI operation \`$op\` failed: $error"
      fi
      printf '%s\n' "$body"
      return 0
    fi
    sleep 15
  done
}

if [[ "$DRY_RUN" == 1 ]]; then
  body="$(model_body)"
  post "models:upload" "$body"
  echo "# then: wait for the upload operation; MODEL = its response.model"
  run gcloud ai endpoints list --project "$PROJECT" --region "$REGION" "--filter=display_name=$ENDPOINT_NAME" "--format=value(name)"
  echo "# if none:"
  body="$(endpoint_body)"
  post "endpoints" "$body"
  body="$(deploy_body "projects/$PROJECT/locations/$REGION/models/MODEL_ID")"
  post "endpoints/ENDPOINT_ID:deployModel" "$body"
  exit 0
fi

capture ACCESS_TOKEN "get an access token for the Vertex AI API" gcloud auth print-access-token
if [[ -z "$ACCESS_TOKEN" ]]; then
  die "could not get an access token for the Vertex AI API: \`gcloud auth print-access-token\` printed nothing; is gcloud logged in (gcloud auth login)?"
fi
# Each response is kept, then read: a failed request or a response without
# the field ends the script naming the step, never an empty value.
step="upload the model (models:upload)"
body="$(model_body)"
response="$(post "models:upload" "$body")"
op="$(response_field "$response" name "$step")"
response="$(wait_op "$op")"
model="$(response_field "$response" response.model "$step")"
echo "deploy_vertex: uploaded $model" >&2
endpoint_names=""
capture endpoint_names "look up the Vertex AI endpoint \`$ENDPOINT_NAME\`" \
  gcloud ai endpoints list --project "$PROJECT" --region "$REGION" "--filter=display_name=$ENDPOINT_NAME" "--format=value(name)"
endpoint="${endpoint_names%%$'\n'*}"
if [[ -z "$endpoint" ]]; then
  step="create the endpoint \`$ENDPOINT_NAME\`"
  body="$(endpoint_body)"
  response="$(post "endpoints" "$body")"
  op="$(response_field "$response" name "$step")"
  response="$(wait_op "$op")"
  endpoint="$(response_field "$response" response.name "$step")"
fi
endpoint_id="${endpoint##*/}"
echo "deploy_vertex: endpoint $endpoint_id; deploying (about 10-15 minutes)" >&2
step="deploy the model on endpoint \`$endpoint_id\`"
body="$(deploy_body "$model")"
response="$(post "endpoints/$endpoint_id:deployModel" "$body")"
op="$(response_field "$response" name "$step")"
wait_op "$op" >/dev/null
echo "deploy_vertex: ready; invoke via .../endpoints/$endpoint_id/invoke/<route> (health: /invoke/health)" >&2
