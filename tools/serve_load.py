#!/usr/bin/env python3
"""Load benchmark of `dgem serve` on the embedded model, over loopback only.

Starts `dgem serve` on a free 127.0.0.1 port, waits for /ready, then sends the
same support-triage decision (with a different ticket per request) from 1 and 8
concurrent clients, once with `layout: document_first` (the state comes first:
no prompt prefix is shared between requests) and once with `layout:
schema_first` (the policy text comes first: its KV cache is reused). Every
request is a ticket the server has not decided before. Prints decisions/s,
p50/p99 latency and the median count of prompt tokens per decision whose KV
state came from the cache (summed over the decision's reads). Request count
and time are bounded; nothing leaves the machine.

With --startup N it also measures what `--warm-priors` buys, N starts each
(medians): the time to /ready and the first and second `support_triage`
decisions after a first start without and with the flag (each start in a fresh
model home, so no calibration prior is on disk), and the time to /ready of a
restart with the priors on disk. --out writes everything as a JSON receipt with
the binary's `dgem --version` (the commit it was built from).

    python3 tools/serve_load.py --dgem target/debug/dgem --requests 16
    python3 tools/serve_load.py --startup 3 --out benchmarks/results/serve_load.json
"""
import argparse
import concurrent.futures as cf
import json
import os
import pathlib
import re
import shutil
import tempfile
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
    return (time.perf_counter() - t) * 1e3, d.get("cached_tokens", 0)


def run(port, layout, clients, n, base):
    """One row: n decisions on tickets numbered base+1..base+n (never decided
    before in this server, so no row re-reads another's states); returns
    decisions/s, p50 and p99 ms and the median KV-cached tokens per decision."""
    post(port, layout, base)  # warm this layout (calibration priors, cache)
    t = time.perf_counter()
    with cf.ThreadPoolExecutor(clients) as ex:
        res = list(ex.map(lambda i: post(port, layout, i), range(base + 1, base + n + 1)))
    wall = time.perf_counter() - t
    lat = sorted(r[0] for r in res)
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
    return n / wall, statistics.median(lat), p99, statistics.median(r[1] for r in res)


def start(dgem, extra, env_extra):
    """Starts `dgem serve` on a free port; returns (process, port, seconds to /ready)."""
    port = free_port()
    env = dict(os.environ, PORT=str(port), MAX_INFLIGHT="8", **env_extra)
    t = time.perf_counter()
    srv = subprocess.Popen([dgem, "serve", "--host", "127.0.0.1", "--port", str(port), *extra],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while time.time() < deadline:
        if srv.poll() is not None:
            sys.exit(f"dgem serve exited with {srv.returncode} before /ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as r:
                if r.status == 200:
                    return srv, port, time.perf_counter() - t
        except Exception:
            time.sleep(0.2)
    stop(srv)
    sys.exit("server did not become ready")


def stop(srv):
    """Stops a server: SIGTERM, then SIGKILL if it has not exited in 30 s."""
    srv.terminate()
    try:
        srv.wait(timeout=30)
    except subprocess.TimeoutExpired:
        srv.kill()
        srv.wait()


def template_decision(port, i):
    """One `support_triage` decision through /api/decide; its wall ms."""
    body = json.dumps({"template": "support_triage",
                       "variables": {"ticket": f"#{i}: {TICKETS[i % len(TICKETS)]}"}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/api/decide", body,
                                 {"content-type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=300) as r:
        r.read()
    return (time.perf_counter() - t) * 1e3


def model_home(dgem, scratch):
    """A fresh model folder linking the cached model files: no priors on disk."""
    model = os.environ["DGEM_MODEL_PATH"]
    if os.path.isfile(model):
        cache = pathlib.Path(model).resolve().parent
    else:
        cache = pathlib.Path(subprocess.run([dgem, "model", "path", model], capture_output=True,
                                            text=True, check=True).stdout.strip()).parent
    home = pathlib.Path(tempfile.mkdtemp(dir=scratch))
    for f in cache.iterdir():
        if f.is_file() and (f.suffix == ".gguf" or f.name.endswith(".gguf.verified")):
            (home / f.name).symlink_to(f.resolve())
    return home


def startup(dgem, starts):
    """The start-up rows: medians over `starts` first starts per setting."""
    rows = {}
    scratch = tempfile.mkdtemp(prefix="dgem-serve-load-")
    try:
        for name, flags in (("no_warm_priors", []), ("warm_priors", ["--warm-priors"])):
            ready, first, second, restart = [], [], [], []
            for n in range(starts):
                home = model_home(dgem, scratch)
                env = {"DGEM_MODEL_DIR": str(home)}
                srv, port, took = start(dgem, ["--studio", *flags], env)
                try:
                    ready.append(took)
                    first.append(template_decision(port, 100 + n))
                    second.append(template_decision(port, 200 + n))
                finally:
                    stop(srv)
                if flags:
                    srv, port, took = start(dgem, ["--studio", *flags], env)
                    stop(srv)
                    restart.append(took)
                shutil.rmtree(home, ignore_errors=True)
            row = {"starts": starts, "ready_s": statistics.median(ready),
                   "first_ms": statistics.median(first), "second_ms": statistics.median(second),
                   "first_over_second": statistics.median(f / s for f, s in zip(first, second))}
            if restart:
                row["restart_ready_s"] = statistics.median(restart)
            rows[name] = row
            print(f"start-up {name}: ready {row['ready_s']:.1f} s, first support_triage decision "
                  f"{row['first_ms']:.0f} ms, second {row['second_ms']:.0f} ms "
                  f"({row['first_over_second']:.1f}x)"
                  + (f", restart ready {row['restart_ready_s']:.1f} s" if restart else ""))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return rows


def version(dgem):
    """The binary's `dgem --version`: its version, commit and whether it was clean."""
    text = subprocess.run([dgem, "--version"], capture_output=True, text=True,
                          check=True).stdout.strip()
    m = re.search(r"(\S+) \(commit (\w+), ([^)]*)\)", text)
    tree = m.group(3) if m else ""
    return {"version_text": text, "version": m.group(1) if m else text.split()[-1],
            "git_revision": m.group(2) if m else "unknown",
            "git_dirty": False if tree == "clean" else True if tree.startswith("sources changed")
            else None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dgem", default="target/debug/dgem")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--startup", type=int, default=0,
                    help="also measure --warm-priors over this many starts per setting")
    ap.add_argument("--out", help="write a JSON receipt here")
    ap.add_argument("--model", default=os.environ.get("DGEM_MODEL_PATH", "gemma3-270m"),
                    help="the served model, as `dgem serve --model` takes it (default: "
                         "$DGEM_MODEL_PATH, else the small model gemma3-270m)")
    args = ap.parse_args()
    # `dgem serve` reads its --model from DGEM_MODEL_PATH.
    os.environ["DGEM_MODEL_PATH"] = args.model
    receipt = {"format": "dgem.bench.serve_load/v1", "created_unix": int(time.time()),
               "dgem": version(args.dgem), "cpus": os.cpu_count(),
               "load_average_before": os.getloadavg()[0], "requests": args.requests,
               "max_inflight": 8, "levels": []}
    srv, port, _ = start(args.dgem, [], {})
    try:
        print(f"{'layout':<15} {'clients':>7} {'decisions/s':>12} {'p50 ms':>9} {'p99 ms':>9} {'KV cached':>10}")
        base = 0
        for layout in ("document_first", "schema_first"):
            for clients in (1, 8):
                base += 1000
                rps, p50, p99, cached = run(port, layout, clients, args.requests, base)
                print(f"{layout:<15} {clients:>7} {rps:>12.2f} {p50:>9.0f} {p99:>9.0f} {cached:>10.0f}")
                receipt["levels"].append({"layout": layout, "clients": clients,
                                          "decisions_per_s": rps, "p50_ms": p50,
                                          "p99_ms": p99, "cached_tokens_median": cached})
    finally:
        stop(srv)
    if args.startup:
        receipt["startup"] = startup(args.dgem, args.startup)
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(receipt, indent=2) + "\n")
        print(f"receipt written to {args.out}")


if __name__ == "__main__":
    main()
