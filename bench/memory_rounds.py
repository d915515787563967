"""Memory across rounds of a session that fills its array quota: each round is a client
that creates small arrays until the proxy answers RESOURCE_EXHAUSTED
(--session_max_arrays, 2^20 by default), then ends. After each round the proxy's and the
worker's RSS are read once they settle; a service meant to run for weeks grows nothing
from round to round (goal: round 5 within 5% of round 1).

    .venv/bin/python bench/memory_rounds.py [--rounds 5] [--json PATH] [--md PATH]

Its numbers are not a test: a round takes minutes (CI runs three rounds of 50k arrays
in tests/e2e/test_memory_returned.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import switchyard
from procs import rss, settled

MIB = 1 << 20

CLIENT = """
import jax, numpy as np, switchyard
switchyard.initialize()
f = jax.jit(lambda x: [x + i for i in range(500)])
x = jax.device_put(np.ones(16, np.float32), jax.devices()[0])
held = []
try:
    while True:  # each call waited for: past the quota a refusal is bound to its handles
        out = f(x)
        jax.block_until_ready(out)
        held.extend(out)
except Exception as e:
    assert "RESOURCE_EXHAUSTED" in str(e) and "--session_max_arrays" in str(e), e
    print("REFUSED AFTER", len(held), flush=True)
held.clear()
switchyard.shutdown()
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json")
    parser.add_argument("--md")
    args = parser.parse_args()
    rows = []
    with switchyard.LocalCluster(workers=1, devices_per_worker=1) as cluster:
        env = {**os.environ, **cluster.env()}
        proxy, worker = cluster.child_pid("proxy"), cluster.child_pid("worker", 0)
        idle = {"proxy": rss(proxy), "worker": rss(worker)}
        for round_ in range(1, args.rounds + 1):
            started = time.monotonic()
            out = subprocess.run([sys.executable, "-c", CLIENT], env=env, capture_output=True,
                                 text=True, timeout=3600)
            took = time.monotonic() - started
            if "REFUSED AFTER" not in out.stdout:
                print(out.stdout + out.stderr[-3000:], file=sys.stderr)
                return 1
            arrays = int(out.stdout.split("REFUSED AFTER")[1].split()[0])
            rows.append({"round": round_, "arrays": arrays, "seconds": round(took, 1),
                         "proxy_rss": settled(proxy), "worker_rss": settled(worker)})
            print(rows[-1], flush=True)
    first, last = rows[0], rows[-1]
    ratios = {p: last[f"{p}_rss"] / first[f"{p}_rss"] for p in ("proxy", "worker")}
    result = {"machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "run": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "idle": idle,
              "rounds": rows, "last_over_first": ratios}
    lines = [
        "# Memory across rounds of a session that fills its array quota", "",
        f"Machine: {result['machine']}. Run: {result['run']}. One worker, one CPU device; "
        "each round a client creates arrays until RESOURCE_EXHAUSTED (--session_max_arrays) "
        "and ends; RSS read once it settles. Goal (issue 34): round "
        f"{args.rounds} within 5% of round 1.", "",
        "| round | arrays | seconds | proxy RSS (MiB) | worker RSS (MiB) |",
        "|---|---|---|---|---|",
        f"| idle, before | | | {idle['proxy'] / MIB:.0f} | {idle['worker'] / MIB:.0f} |",
    ]
    lines += [f"| {r['round']} | {r['arrays']} | {r['seconds']:.0f} | "
              f"{r['proxy_rss'] / MIB:.0f} | {r['worker_rss'] / MIB:.0f} |" for r in rows]
    lines += ["", f"Round {args.rounds} over round 1: proxy {ratios['proxy']:.3f}x, "
              f"worker {ratios['worker']:.3f}x."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    return 0 if max(ratios.values()) <= 1.05 else 1


if __name__ == "__main__":
    sys.exit(main())
