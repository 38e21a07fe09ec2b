#!/usr/bin/env bash
# candle vs llama.cpp on the same GGUF and prompt; see docs/engine-choice.md.
# Usage: tools/candle-compare/run.sh [MODEL.gguf] [ROUNDS]   (from anywhere;
# SKIP_BUILD=1 uses the binaries already built)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
model=${1:-${DGEM_TEST_MODEL:-/tmp/gemma/gemma-3-270m-q4_k_m.gguf}}
rounds=${2:-3}
out=${OUT_DIR:-$root/target-candle/compare}
mkdir -p "$out"

# llama.cpp side: the dev profile of the main workspace (dependencies, llama.cpp
# included, are optimized there). candle side: its own workspace and target dir,
# AVX2/FMA enabled through target-cpu=native (5x slower without).
if [ -z "${SKIP_BUILD:-}" ]; then
(cd "$root" && CARGO_TARGET_DIR=$root/target nice -n 10 \
    cargo build -q -p dgem-backend-llama --example llama_logprobs)
(cd "$root/tools/candle-compare" && CARGO_TARGET_DIR=$root/target-candle \
    RUSTFLAGS="-C target-cpu=native" nice -n 10 cargo build -q --release)
fi
llama=$root/target/debug/examples/llama_logprobs
candle=$root/target-candle/release/candle-compare

# Reference distribution (token ids + full log-softmax) from llama.cpp.
"$llama" "$model" 2 1 "$out/reference.json" > /dev/null
# Upstream candle model file, for the record (distribution only).
"$candle" "$model" "$out/reference.json" 2 1 --upstream > "$out/upstream.txt"

# Interleaved timing rounds: each line is one process (1 warm-up + 5 timed runs).
: > "$out/runs.jsonl"
for r in $(seq "$rounds"); do
    for t in 1 2; do
        echo "round $r threads $t load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
        "$llama" "$model" "$t" 5 >> "$out/runs.jsonl"
        "$candle" "$model" "$out/reference.json" "$t" 5 > "$out/candle-t$t-r$r.txt"
        tail -n 1 "$out/candle-t$t-r$r.txt" >> "$out/runs.jsonl"
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
cat "$out/upstream.txt" "$out/candle-t2-r$rounds.txt"
python3 - "$out/runs.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for t in (1, 2):
    med = {}
    for e in ("llama.cpp", "candle-fixed"):
        m = [r["median_ms"] for r in rows if r["engine"] == e and r["threads"] == t]
        med[e] = statistics.median(m)
        n = rows[0]["prompt_tokens"]
        print(f"{e:13} {t} thread(s): median of {len(m)} process medians {med[e]:7.1f} ms "
              f"({med[e] / n:.2f} ms/token); per process {m}")
    print(f"  candle / llama.cpp = {med['candle-fixed'] / med['llama.cpp']:.2f}x")
EOF
