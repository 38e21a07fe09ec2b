#!/usr/bin/env bash
# Shared helpers for the deploy scripts (serving.md §11–12). Sourced, not run.
#
# Every script accepts --dry-run (or DRY_RUN=1): it then prints each command it
# would run, one per line, shell-quoted, and runs nothing. The printed lines are
# snapshot-tested (crates/dgem-deploy-tests), so keep them deterministic, and
# pasting a printed line must run it. Dry runs write nothing into the repository.
#
# Exit status: 1 for a configuration error (bad flag, missing or invalid
# setting), 2 for an internal failure.
set -euo pipefail

DEPLOY_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO_ROOT="$(cd "$DEPLOY_DIR/.." && pwd)"
export DEPLOY_DIR REPO_ROOT
DRY_RUN="${DRY_RUN:-0}"

# Parse the flags every script shares; anything else is an error.
parse_common_flags() {
  while (($#)); do
    case "$1" in
      --dry-run) DRY_RUN=1 ;;
      -h | --help)
        usage
        exit 0
        ;;
      *)
        echo "error: unknown argument \`$1\`; allowed: --dry-run, --help" >&2
        exit 1
        ;;
    esac
    shift
  done
}

# A token substitution that a printed (dry-run) command keeps live: a word
# holding it is double-quoted so that pasting the line runs gcloud.
# shellcheck disable=SC2016
TOKEN_SUBST='$(gcloud auth print-access-token)'
export TOKEN_SUBST

# One word, quoted for a POSIX shell only when it needs it; a word whose only
# special part is $TOKEN_SUBST goes in double quotes so the substitution runs.
quote() {
  local rest="${1//"$TOKEN_SUBST"/}" unsafe='["\`$!]'
  if [[ "$1" =~ ^[A-Za-z0-9_./:=@,%+-]+$ ]]; then
    printf '%s' "$1"
  elif [[ "$1" == *"$TOKEN_SUBST"* && ! "$rest" =~ $unsafe ]]; then
    printf '"%s"' "$1"
  else
    local q="'\\''"
    printf "'%s'" "${1//\'/$q}"
  fi
}

# Print a command, quoted; run it unless this is a dry run.
run() {
  if [[ "$DRY_RUN" == 1 ]]; then
    local out="" a
    for a in "$@"; do
      out+="$(quote "$a") "
    done
    echo "${out% }"
  else
    "$@"
  fi
}

# Fail with a message naming the variable when it is unset or empty.
require() {
  local name
  for name in "$@"; do
    if [[ -z "${!name:-}" ]]; then
      echo "error: \`$name\` must be set (see docs/deploy.md)" >&2
      exit 1
    fi
  done
}

# Print, as one pasteable command, the writing of stdin to file $1 (a quoted
# heredoc, so nothing in it expands); a dry run's stand-in for writing a file.
print_write() {
  local text
  text="$(cat)"
  echo "mkdir -p $(quote "$(dirname "$1")") && cat >$(quote "$1") <<'EOF_DGEM'"
  printf '%s\n' "$text"
  echo "EOF_DGEM"
}

# Project-wide defaults (override through the environment).
set_defaults() {
  require PROJECT
  REGION="${REGION:-us-central1}"
  AR_REPO="${AR_REPO:-dgem}"
  IMAGE_NAME="${IMAGE_NAME:-dgem-serve}"
  TAG="${TAG:-$(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo dev)}"
  IMAGE="${IMAGE:-$REGION-docker.pkg.dev/$PROJECT/$AR_REPO/$IMAGE_NAME:$TAG}"
  BUCKET="${BUCKET:-dgem-weights-$PROJECT}"
  WEIGHTS_PREFIX="${WEIGHTS_PREFIX:-dgemma}"
  SERVICE="${SERVICE:-dgemma}"
  SERVICE_ACCOUNT="${SERVICE_ACCOUNT:-dgemma-gpu-sa@$PROJECT.iam.gserviceaccount.com}"
  export REGION AR_REPO IMAGE_NAME TAG IMAGE BUCKET WEIGHTS_PREFIX SERVICE SERVICE_ACCOUNT
}

# The image reference pinned by digest: IMAGE_DIGEST if given, otherwise asked
# from Artifact Registry (a dry run uses the placeholder sha256:IMAGE_DIGEST).
pinned_image() {
  local base="${IMAGE%:*}"
  if [[ -n "${IMAGE_DIGEST:-}" ]]; then
    echo "$base@$IMAGE_DIGEST"
  elif [[ "$DRY_RUN" == 1 ]]; then
    echo "$base@sha256:IMAGE_DIGEST"
  else
    local digest
    digest="$(gcloud artifacts docker images describe "$IMAGE" --format='value(image_summary.digest)')"
    echo "$base@$digest"
  fi
}
