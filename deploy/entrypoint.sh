#!/usr/bin/env bash
# Serving-container entrypoint (serving.md §10–11):
#   1. STAGING=tmpfs: start `dgem stage` into $STAGE_DIR and wait for its
#      header phase (tokenizer/config whole, safetensors headers, files at full
#      size: a few seconds), since `dgem serve` needs the tokenizer file;
#      fuse/baked: the weights are used in place;
#   2. start `dgem serve --backend vllm=…` on $AIP_HTTP_PORT / $PORT, so
#      /health answers within seconds (Vertex fails a deploy otherwise; Cloud
#      Run's startup probe polls it) and reports the staging progress;
#   3. start vLLM on 127.0.0.1:8000 at once: it initializes while bodies
#      stream and blocks in load_weights until .ready (sitecustomize.py);
#      after it is up, free the tmpfs copy.
# The container exits when dgem serve or vLLM exits, with that exit status.
# A configuration error (no weights, bad STAGING, bad DGEM_WEIGHTS_URI) exits 1
# before anything starts; 2 is left for internal failures.
set -euo pipefail

PORT="${AIP_HTTP_PORT:-${PORT:-8080}}"
STAGE_DIR="${STAGE_DIR:-/tmp/dgemma}"
WEIGHTS_URI="${DGEM_WEIGHTS_URI:-${AIP_STORAGE_URI:-}}"
MODEL="${MODEL:-/mnt/gcs/dgemma}"
BAKED_DIR="${BAKED_DIR:-/opt/dgemma/weights}"
VLLM_PORT=8000
DRY_RUN="${DRY_RUN:-0}"
# One served canvas for vLLM and dgem serve (which reads CANVAS too): where a
# wide schema is chunked depends on it. The container's default is 128.
CANVAS="${CANVAS:-128}"
export CANVAS

log() { echo "[init] $*" >&2; }

# Print words as one command line, quoting only the words that need it.
print_cmd() {
  local out="" a q="'\\''"
  for a in "$@"; do
    if [[ "$a" =~ ^[A-Za-z0-9_./:=@,%+-]+$ ]]; then
      out+="$a "
    else
      out+="'${a//\'/$q}' "
    fi
  done
  echo "${out% }"
}

# Staging mode: explicit STAGING, else baked weights, else a mounted model
# directory (with COPY_TO_SHM=1 and a bucket URI: stage to tmpfs anyway), else
# the bucket URI.
staging_mode() {
  if [[ -n "${STAGING:-}" && "${STAGING}" != auto ]]; then
    echo "$STAGING"
  elif [[ "${WEIGHTS_SOURCE:-}" == baked && -f "$BAKED_DIR/config.json" ]]; then
    echo baked
  elif [[ -f "$MODEL/config.json" && ( "${COPY_TO_SHM:-0}" != 1 || -z "$WEIGHTS_URI" ) ]]; then
    echo fuse
  elif [[ -n "$WEIGHTS_URI" ]]; then
    echo tmpfs
  else
    echo "error: no weights: set DGEM_WEIGHTS_URI (gs://…), mount MODEL, or bake $BAKED_DIR" >&2
    return 1
  fi
}

# The vLLM command line (serving.md §11), one word per line.
vllm_args() {
  local model="$1" mode="$2"
  printf '%s\n' vllm serve "$model" --host 127.0.0.1 --port "$VLLM_PORT" \
    --served-model-name dgemma --trust-remote-code \
    --max-num-seqs "${MAX_SEQS:-32}" --max-model-len "${MAX_MODEL_LEN:-4096}" \
    --attention-backend "${ATTN:-TRITON_ATTN}" \
    --gpu-memory-utilization "${GPU_UTIL:-0.40}" \
    --kv-cache-memory "$((${KV_CACHE_GB:-2} * 1073741824))" \
    --max-logprobs 32 --enable-prefix-caching \
    --diffusion-config "{\"canvas_length\": ${CANVAS:-128}}" \
    --override-generation-config '{"max_new_tokens": null}' \
    --async-scheduling
  if [[ "${ENFORCE_EAGER:-1}" == 1 ]]; then
    printf '%s\n' --enforce-eager --kernel-config \
      '{"enable_flashinfer_autotune":false,"enable_cutedsl_warmup":false,"enable_jit_warmup":false}'
  fi
  if [[ "${DISABLE_MM:-1}" == 1 ]]; then
    printf '%s\n' --language-model-only --skip-mm-profiling --limit-mm-per-prompt '{"image":0,"video":0}'
  fi
  if [[ "$mode" != tmpfs ]]; then
    printf '%s\n' --safetensors-load-strategy prefetch
  fi
  if [[ -n "${EXTRA_ARGS:-}" ]]; then
    local extra
    read -r -a extra <<<"$EXTRA_ARGS"
    printf '%s\n' "${extra[@]}"
  fi
}

# 200 from a local URL within 2 s (python3 ships with the vLLM image).
http_ok() {
  python3 - "$1" <<'PY' >/dev/null 2>&1
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=2)
PY
}

# Wait until `dgem stage` reports headers_ready (or exits with an error).
wait_for_headers() {
  local pid="$1" progress="$STAGE_DIR/.dgem-stage/progress.json"
  until grep -q '"headers_ready":true' "$progress" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid" || return $?
      return 0
    fi
    sleep 0.2
  done
}

# The weights URI, when set, must be something `dgem stage` can read.
check_weights_uri() {
  if [[ -n "$WEIGHTS_URI" && ! "$WEIGHTS_URI" =~ ^(gs://[^/]+|https?://[^/]+|/) ]]; then
    echo "error: \`DGEM_WEIGHTS_URI\` must be gs://BUCKET[/PREFIX], an http(s):// URL or an absolute path. Given: \`$WEIGHTS_URI\`" >&2
    exit 1
  fi
}

main() {
  local mode model
  check_weights_uri
  mode="$(staging_mode)" || exit 1
  case "$mode" in
    tmpfs) model="$STAGE_DIR" ;;
    fuse) model="$MODEL" ;;
    baked) model="$BAKED_DIR" ;;
    *)
      echo "error: \`STAGING\` must be one of [auto, tmpfs, fuse, baked]. Given: \`$mode\`" >&2
      exit 1
      ;;
  esac
  local -a vllm serve stage
  mapfile -t vllm < <(vllm_args "$model" "$mode")
  local -a serve_extra=()
  read -r -a serve_extra <<<"${DGEM_SERVE_ARGS:-}"
  # Only tmpfs mode stages anything for /health to report.
  local -a staging_flag=()
  if [[ "$mode" == tmpfs ]]; then
    staging_flag=(--staging-dir "$STAGE_DIR")
  fi
  serve=(dgem serve --port "$PORT" "${staging_flag[@]}"
    --backend "vllm=http://127.0.0.1:$VLLM_PORT" --tokenizer "$model/tokenizer.json"
    "${serve_extra[@]}")
  stage=(dgem stage "$WEIGHTS_URI" "$STAGE_DIR" --parallel "${STAGE_PARALLEL:-64}"
    --chunk-mib "${STAGE_CHUNK_MIB:-64}")
  if [[ "$DRY_RUN" == 1 ]]; then
    echo "mode=$mode model=$model port=$PORT"
    if [[ "$mode" == tmpfs ]]; then
      print_cmd "${stage[@]}"
    fi
    print_cmd "${serve[@]}"
    print_cmd "${vllm[@]}"
    return 0
  fi

  log "boot: mode=$mode model=$model port=$PORT"
  local stage_pid=""
  if [[ "$mode" == tmpfs ]]; then
    "${stage[@]}" >/dev/null &
    stage_pid=$!
    wait_for_headers "$stage_pid"
    log "headers and full-size files in place; starting servers while bodies stream"
  fi
  "${serve[@]}" &
  local serve_pid=$!
  if [[ "$mode" == tmpfs ]]; then
    export DGEM_STAGE_DIR="$STAGE_DIR"
    export PYTHONPATH="/opt/dgem/python${PYTHONPATH:+:$PYTHONPATH}"
  fi

  "${vllm[@]}" &
  local vllm_pid=$!
  trap 'kill -TERM "$serve_pid" "$vllm_pid" ${stage_pid:+"$stage_pid"} 2>/dev/null || true' TERM INT

  if [[ "$mode" == tmpfs ]]; then
    (
      # RAM reclaim: once vLLM answers, the weights are on the GPU.
      until http_ok "http://127.0.0.1:$VLLM_PORT/health"; do sleep 2; done
      if [[ -f "$STAGE_DIR/.ready" ]]; then
        rm -f "$STAGE_DIR"/*.safetensors
        log "Reclaimed the tmpfs copy of the weights"
      fi
    ) &
  fi

  # Stop when a server exits, or when staging fails (vLLM would wait for .ready
  # forever); staging that succeeds just leaves the servers running.
  local status=0 done_pid=""
  local -a pids=("$serve_pid" "$vllm_pid" ${stage_pid:+"$stage_pid"})
  while :; do
    status=0
    wait -n -p done_pid "${pids[@]}" || status=$?
    if [[ "$done_pid" == "$stage_pid" && "$status" == 0 ]]; then
      log "weights staged and verified"
      pids=("$serve_pid" "$vllm_pid")
      continue
    fi
    break
  done
  log "process $done_pid exited (status $status); stopping"
  kill -TERM "$serve_pid" "$vllm_pid" 2>/dev/null || true
  exit "$status"
}

main "$@"
