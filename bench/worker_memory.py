"""What a worker keeps after its first sessions, by allocator: its RSS when idle, after a
session that compiles a trivial program (the plugin's compiler paged in and set up),
and after two sessions that each compile a 500-output program and end. Each allocator
runs in a cluster of its own (one worker, one CPU device), preloaded into its processes;
those not installed here are skipped.

    .venv/bin/python bench/worker_memory.py [--json PATH] [--md PATH]

Answers whether the worker's memory over idle after its first session is the
allocator's to give back: glibc as shipped (the worker trims freed heap at quiet
points), glibc with fewer arenas or a fixed trim threshold, jemalloc returning freed
pages at once, tcmalloc.
"""

from __future__ import annotations

import argparse
import ctypes.util
import json
import os
import platform
import subprocess
import sys
import time

import switchyard
from procs import settled

MIB = 1 << 20

TRIVIAL = """
import jax, numpy as np, switchyard
switchyard.initialize()
x = jax.device_put(np.ones(1, np.float32), jax.devices()[0])
jax.block_until_ready(jax.jit(lambda v: v + 1)(x))
switchyard.shutdown()
print("DONE", flush=True)
"""

LARGE = """
import jax, numpy as np, switchyard
switchyard.initialize()
x = jax.device_put(np.ones(16, np.float32), jax.devices()[0])
jax.block_until_ready(jax.jit(lambda v: [v + i for i in range(500)])(x))
switchyard.shutdown()
print("DONE", flush=True)
"""


def allocators() -> list[tuple[str, dict[str, str]]]:
    found = [("glibc (as shipped)", {}),
             ("glibc, MALLOC_ARENA_MAX=2", {"MALLOC_ARENA_MAX": "2"}),
             ("glibc, MALLOC_TRIM_THRESHOLD_=128 KiB", {"MALLOC_TRIM_THRESHOLD_": "131072"})]
    if jemalloc := ctypes.util.find_library("jemalloc"):
        found.append(("jemalloc, decay 0", {"LD_PRELOAD": jemalloc,
                                            "MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:0"}))
    if tcmalloc := ctypes.util.find_library("tcmalloc_minimal"):
        found.append(("tcmalloc", {"LD_PRELOAD": tcmalloc}))
    return found


def measure(extra_env: dict[str, str]) -> dict[str, float]:
    saved = {k: os.environ.get(k) for k in extra_env}
    os.environ.update(extra_env)  # the cluster's processes inherit it; clients do not
    try:
        cluster = switchyard.LocalCluster(workers=1, devices_per_worker=1)
        cluster.__enter__()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        env = {**os.environ, **cluster.env()}
        for k in extra_env:
            env.pop(k, None)
        worker = cluster.child_pid("worker", 0)
        row = {"idle": settled(worker, seconds=45, still_s=8) / MIB}
        for name, source in (("trivial", TRIVIAL), ("large 1", LARGE), ("large 2", LARGE)):
            out = subprocess.run([sys.executable, "-c", source], env=env, capture_output=True,
                                 text=True, timeout=600)
            assert "DONE" in out.stdout, out.stderr[-3000:]
            row[name] = settled(worker, seconds=45, still_s=8) / MIB
        return row
    finally:
        cluster.__exit__(None, None, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json")
    parser.add_argument("--md")
    args = parser.parse_args()
    rows = {name: measure(extra) for name, extra in allocators()}
    lines = ["| allocator | idle | after a trivial compile | after a large one | after another |"
             " large 2 over trivial |", "|---|---|---|---|---|---|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['idle']:.0f} | {r['trivial']:.0f} | {r['large 1']:.0f} |"
                     f" {r['large 2']:.0f} | +{r['large 2'] - r['trivial']:.0f} |")
    table = "\n".join(lines)
    print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": f"{platform.machine()}, {os.cpu_count()} cores",
                       "rows_mib": rows}, f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write("# Worker RSS (MiB) after its first sessions, by allocator\n\n"
                    f"Machine: {platform.machine()}, {os.cpu_count()} cores. Run: "
                    f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
                    "`bench/worker_memory.py`.\n\n" + table + "\n")


if __name__ == "__main__":
    main()
