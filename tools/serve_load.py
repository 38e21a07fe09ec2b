#!/usr/bin/env python3
"""Load benchmark of `dgem serve` on the embedded model, over loopback only.

Starts `dgem serve` on a free 127.0.0.1 port, waits for /ready, then sends the
same support-triage decision (with a different ticket per request) from 1 and 8
concurrent clients, once with `layout: document_first` (the state comes first:
no prompt prefix is shared between requests) and once with `layout:
schema_first` (the policy text comes first: its KV cache is reused). Prints
decisions/s, p50/p99 latency and the share of prompt tokens served from the KV
cache. Request count and time are bounded; nothing leaves the machine.

    python3 tools/serve_load.py --dgem target/debug/dgem --requests 16
"""
import argparse
import concurrent.futures as cf
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

SCHEMA = {
    "instructions": "Route customer support tickets.",
    "questions": [
        {"id": "urgent", "type": "boolean", "instructions": "Does this need action today?"},
        {"id": "team", "type": "choice", "instructions": "Which team owns it?",
         "options": ["billing", "support", "engineering"]},
        {"id": "sentiment", "type": "score", "instructions": "How upset is the customer?",
         "levels": ["calm", "annoyed", "furious"]},
    ],
}
TICKETS = [
    "I was charged twice for my renewal, please refund the duplicate.",
    "The API returns 500 for every request since this morning's deploy.",
    "How do I change the email address for team notifications?",
    "Your export to CSV drops the last column of every report.",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, layout, i):
    schema = dict(SCHEMA, layout=layout)
    body = json.dumps({
        "model": "dgem",
        "messages": [
            {"role": "system", "content": json.dumps(schema)},
            {"role": "user", "content": json.dumps({"ticket": f"#{i}: {TICKETS[i % len(TICKETS)]}"})},
        ],
    }).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body,
                                 {"content-type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=300) as r:
        env = json.loads(json.loads(r.read())["choices"][0]["message"]["content"])
    d = env["diagnostics"]
    return (time.perf_counter() - t) * 1e3, d.get("cached_tokens", 0), d.get("prompt_tokens") or 0


def run(port, layout, clients, n):
    post(port, layout, 0)  # warm this layout (calibration priors, cache)
    t = time.perf_counter()
    with cf.ThreadPoolExecutor(clients) as ex:
        res = list(ex.map(lambda i: post(port, layout, i), range(1, n + 1)))
    wall = time.perf_counter() - t
    lat = sorted(r[0] for r in res)
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
    cached = sum(r[1] for r in res) / max(1, sum(r[2] * len(SCHEMA["questions"]) for r in res))
    return n / wall, statistics.median(lat), p99, cached


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dgem", default="target/debug/dgem")
    ap.add_argument("--requests", type=int, default=16)
    args = ap.parse_args()
    port = free_port()
    env = dict(os.environ, PORT=str(port), MAX_INFLIGHT="8")
    srv = subprocess.Popen([args.dgem, "serve", "--host", "127.0.0.1", "--port", str(port)], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 600
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(1)
        else:
            sys.exit("server did not become ready")
        print(f"{'layout':<15} {'clients':>7} {'decisions/s':>12} {'p50 ms':>9} {'p99 ms':>9} {'KV reuse':>9}")
        for layout in ("document_first", "schema_first"):
            for clients in (1, 8):
                rps, p50, p99, cached = run(port, layout, clients, args.requests)
                print(f"{layout:<15} {clients:>7} {rps:>12.2f} {p50:>9.0f} {p99:>9.0f} {cached:>8.0%}")
    finally:
        srv.terminate()
        srv.wait(timeout=30)


if __name__ == "__main__":
    main()
