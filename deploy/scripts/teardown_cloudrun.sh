#!/usr/bin/env bash
# Delete the Cloud Run service (the bucket and image stay).
#
#   PROJECT=my-proj [SERVICE=dgemma] deploy/scripts/teardown_cloudrun.sh [--dry-run]
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() { sed -n '2,4p' "${BASH_SOURCE[0]}"; }
parse_common_flags "$@"
set_defaults
run gcloud run services delete "$SERVICE" --project "$PROJECT" --region "$REGION" --quiet
