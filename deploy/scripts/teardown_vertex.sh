#!/usr/bin/env bash
# Undeploy every model from the dedicated endpoint, delete the endpoint and the
# uploaded `dgemma` models (the bucket and image stay).
#
#   PROJECT=my-proj [ENDPOINT_NAME=dgemma-dedicated-g4] deploy/scripts/teardown_vertex.sh [--dry-run]
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() { sed -n '2,5p' "${BASH_SOURCE[0]}"; }
parse_common_flags "$@"
set_defaults
ENDPOINT_NAME="${ENDPOINT_NAME:-dgemma-dedicated-g4}"
loc=(--project "$PROJECT" --region "$REGION")

if [[ "$DRY_RUN" == 1 ]]; then
  run gcloud ai endpoints list "${loc[@]}" "--filter=display_name=$ENDPOINT_NAME" "--format=value(name)"
  run gcloud ai endpoints describe ENDPOINT_ID "${loc[@]}" "--format=value(deployedModels[].id)"
  run gcloud ai endpoints undeploy-model ENDPOINT_ID "${loc[@]}" --deployed-model-id DEPLOYED_MODEL_ID --quiet
  run gcloud ai endpoints delete ENDPOINT_ID "${loc[@]}" --quiet
  run gcloud ai models list "${loc[@]}" --filter=display_name=dgemma "--format=value(name)"
  run gcloud ai models delete MODEL_ID "${loc[@]}" --quiet
  exit 0
fi

# Each lookup is captured first: a failing one in a `for` word list would be
# an empty list, and the teardown would end "successfully" having done nothing.
endpoint_names=""
capture endpoint_names "list the Vertex AI endpoints named \`$ENDPOINT_NAME\`" \
  gcloud ai endpoints list "${loc[@]}" "--filter=display_name=$ENDPOINT_NAME" "--format=value(name)"
for endpoint in $endpoint_names; do
  id="${endpoint##*/}"
  deployed_ids=""
  capture deployed_ids "list the models deployed on endpoint \`$id\`" \
    gcloud ai endpoints describe "$id" "${loc[@]}" "--format=value(deployedModels[].id)"
  for deployed in ${deployed_ids//;/ }; do
    run gcloud ai endpoints undeploy-model "$id" "${loc[@]}" --deployed-model-id "$deployed" --quiet
  done
  run gcloud ai endpoints delete "$id" "${loc[@]}" --quiet
done
model_names=""
capture model_names "list the uploaded \`dgemma\` models" \
  gcloud ai models list "${loc[@]}" --filter=display_name=dgemma "--format=value(name)"
for model in $model_names; do
  run gcloud ai models delete "${model##*/}" "${loc[@]}" --quiet
done
