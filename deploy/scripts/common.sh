#!/usr/bin/env bash
# Shared helpers for the deploy scripts (serving.md §11–12). Sourced, not run.
#
# Every script accepts --dry-run (or DRY_RUN=1): it then prints each command it
# would run, one per line, shell-quoted, and runs nothing. The printed lines are
# snapshot-tested (crates/dgem-deploy-tests), so keep them deterministic, and
# pasting a printed line must run it. Dry runs write nothing into the repository.
#
# Exit status: 1 for a configuration error (bad flag, missing or invalid
# setting) or a lookup that failed (gcloud not logged in, image not pushed), 2
# for an internal failure; a command that fails passes on its own status. Each
# failure names the step on stderr.
#
# Command substitutions: bash runs `$(...)` without errexit unless
# inherit_errexit is set (bash 4.4+), and `local v=$(...)` / `export v=$(...)`
# hide the status, so a failed lookup used to become an empty value (an image
# `…@` with no digest). Here inherit_errexit is on where bash has it, values
# are declared and assigned in separate statements, and every lookup goes
# through `capture` (or checks its status) and checks what it got.
set -euo pipefail
shopt -s inherit_errexit 2>/dev/null || true

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

# A command as one line, each word quoted (a pasteable line).
cmdline() {
  local out="" a q
  for a in "$@"; do
    q="$(quote "$a")"
    out+="$q "
  done
  printf '%s\n' "${out% }"
}

# cmdline for an error message: a bearer token in a header word is hidden.
shown_cmdline() {
  local words=() a
  for a in "$@"; do
    if [[ "$a" == "Authorization: Bearer "* && "$a" != *"$TOKEN_SUBST"* ]]; then
      a="Authorization: Bearer [hidden]"
    fi
    words+=("$a")
  done
  cmdline "${words[@]}"
}

# A hint for a failed command: gcloud's usual cause is a missing login.
fail_hint() {
  if [[ "$1" == gcloud ]]; then
    echo "; is gcloud logged in (gcloud auth login) with access to the project?"
  fi
}

# Print a command, quoted; run it unless this is a dry run. A failing command
# ends the script with its status, naming the command.
run() {
  if [[ "$DRY_RUN" == 1 ]]; then
    cmdline "$@"
  else
    local _run_status=0 _run_line _run_hint
    "$@" || _run_status=$?
    if ((_run_status != 0)); then
      _run_line="$(shown_cmdline "$@")"
      _run_hint="$(fail_hint "$1")"
      echo "error: step failed (exit status $_run_status): \`$_run_line\`$_run_hint" >&2
      exit "$_run_status"
    fi
  fi
}

# Set variable $1 to the output of the command $3… (trailing newlines dropped):
# a read-only lookup, run as it is (not printed) whatever DRY_RUN says, so a dry
# run must not reach one. Exits 1 naming the step $2 (in words) and the command
# when it fails; the caller checks the value it needs. (The locals are prefixed
# so that they cannot hide the caller's variable $1.)
capture() {
  local _cap_var="$1" _cap_step="$2" _cap_value _cap_status=0 _cap_line _cap_hint
  shift 2
  _cap_value="$("$@")" || _cap_status=$?
  if ((_cap_status != 0)); then
    _cap_line="$(shown_cmdline "$@")"
    _cap_hint="$(fail_hint "$1")"
    echo "error: could not $_cap_step: \`$_cap_line\` failed (exit status $_cap_status)$_cap_hint" >&2
    exit 1
  fi
  printf -v "$_cap_var" '%s' "$_cap_value"
}

# Fail (exit 1) with a message.
die() {
  echo "error: $*" >&2
  exit 1
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
  local text dir dir_q file_q
  text="$(cat)"
  dir="$(dirname "$1")"
  dir_q="$(quote "$dir")"
  file_q="$(quote "$1")"
  echo "mkdir -p $dir_q && cat >$file_q <<'EOF_DGEM'"
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
# Fails (exit 1), naming the lookup, rather than print an image without one;
# callers assign it on a line of its own (`PINNED_IMAGE="$(pinned_image)"`) so
# that the failure stops them too.
pinned_image() {
  local base digest step
  base="${IMAGE%:*}"
  if [[ -n "${IMAGE_DIGEST:-}" ]]; then
    digest="$IMAGE_DIGEST"
  elif [[ "$DRY_RUN" == 1 ]]; then
    digest="sha256:IMAGE_DIGEST"
  else
    step="resolve the digest of image \`$IMAGE\` (set IMAGE_DIGEST to skip this lookup)"
    capture digest "$step" \
      gcloud artifacts docker images describe "$IMAGE" --format='value(image_summary.digest)'
    if [[ ! "$digest" =~ ^sha256:[0-9a-f]{64}$ ]]; then
      die "could not $step: \`gcloud artifacts docker images describe\` printed \`$digest\`, not sha256:<64 hex>; was the image pushed (deploy/scripts/build_push.sh)?"
    fi
  fi
  if [[ -z "$base" || -z "$digest" ]]; then
    echo "error: internal: empty image \`$base\` or digest \`$digest\`" >&2
    exit 2
  fi
  echo "$base@$digest"
}
