#!/usr/bin/env bash
# Cloud Run GPU tiers (serving.md §10.4, §12.1). Sourced, not run.
#   rtxpro6000: 20 vCPU / 80 GiB, weights staged to tmpfs by `dgem stage`, vision on.
#   l4:          8 vCPU / 32 GiB, weights streamed from the FUSE mount, vision off
#                (tmpfs weights plus the vision tower get the container OOM-killed).

# Set the per-tier variables for TIER; fail naming the allowed values.
cloudrun_profile() {
  case "${TIER:-rtxpro6000}" in
    rtxpro6000)
      CPU=20 MEMORY=80Gi GPU_TYPE=nvidia-rtx-pro-6000 STAGING=tmpfs
      CANVAS=128 MAX_MODEL_LEN=8192 DISABLE_MM=0
      ;;
    l4)
      CPU=8 MEMORY=32Gi GPU_TYPE=nvidia-l4 STAGING=fuse
      CANVAS=32 MAX_MODEL_LEN=32768 DISABLE_MM=1
      ;;
    *)
      echo "error: \`TIER\` must be one of [rtxpro6000, l4]. Given: \`${TIER}\`" >&2
      exit 1
      ;;
  esac
  # Startup probe: /health answers 200 within seconds of boot (dgem serve starts
  # first), so probe often and allow a long window (120 × 5 s = 10 min), never
  # the single long TCP probe that kills the container on one miss.
  PROBE_PATH=/health PROBE_INITIAL_DELAY=10 PROBE_PERIOD=5 PROBE_TIMEOUT=4 PROBE_FAILURES=120
  MIN_INSTANCES="${MIN_INSTANCES:-0}" MAX_INSTANCES="${MAX_INSTANCES:-1}"
  CONCURRENCY="${CONCURRENCY:-32}" PORT=8080
  WEIGHTS_URI="gs://$BUCKET/$WEIGHTS_PREFIX"
  export CPU MEMORY GPU_TYPE STAGING CANVAS MAX_MODEL_LEN DISABLE_MM PROBE_PATH \
    PROBE_INITIAL_DELAY PROBE_PERIOD PROBE_TIMEOUT PROBE_FAILURES MIN_INSTANCES \
    MAX_INSTANCES CONCURRENCY PORT WEIGHTS_URI
}

# Container environment for the tier, as NAME=VALUE lines.
cloudrun_env() {
  cat <<ENV
STAGING=$STAGING
DGEM_WEIGHTS_URI=$WEIGHTS_URI
MODEL=/mnt/gcs/$WEIGHTS_PREFIX
CANVAS=$CANVAS
MAX_SEQS=32
MAX_MODEL_LEN=$MAX_MODEL_LEN
GPU_UTIL=0.40
KV_CACHE_GB=2
ATTN=TRITON_ATTN
ENFORCE_EAGER=1
DISABLE_MM=$DISABLE_MM
TORCH_COMPILE_DISABLE=1
VLLM_WORKER_MULTIPROC_METHOD=fork
CUDA_MODULE_LOADING=LAZY
DEFAULT_SAMPLES=1
MAX_INFLIGHT=8
ENV
}
