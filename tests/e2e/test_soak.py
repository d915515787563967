"""Soak: two clients create, compute, fetch and delete through a local cluster for
SWITCHYARD_SOAK_MINUTES (default 3) minutes (tests/soak/soak.py, `./dev soak`); no client
fails or hangs, the workers hold nothing afterwards, and no Switchyard process's RSS grows
faster than BOUND. The table of every process's RSS is printed, and is the failure message."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

MINUTES = float(os.environ.get("SWITCHYARD_SOAK_MINUTES", "3"))
# MiB/min. The goal, 1 MiB/min, is for an hour: a 12-minute run here fitted +0.0 (up, rm,
# proxy) and +0.5/+0.7 (the workers). Three minutes leave 135 s to fit after the 45 s
# warm-up, and a worker's RSS wanders by +-15 MiB around a flat line meanwhile (programs
# compiled and freed, up to 20 buffers of up to 1 MiB in flight, the allocator keeping
# and returning memory): every 135 s window of that 12-minute run fitted between -6 and
# +11 MiB/min, and 3-minute runs gave the workers +5. 15 stays clear of that noise and
# still fails a leak of ~16 KiB per iteration (each worker serves ~900 iterations a
# minute), e.g. a leaked buffer of 32 KiB or more; leaked objects the workers count are
# caught anyway (they must hold no buffer and no executable afterwards). 30 minutes and
# more get the goal itself.
BOUND = 15.0 if MINUTES < 30 else 1.0
SOAK = pathlib.Path(__file__).resolve().parents[1] / "soak" / "soak.py"


def test_two_clients_create_compute_fetch_delete_without_growing(tmp_path):
    out = tmp_path / "soak.json"
    result = subprocess.run(
        [sys.executable, str(SOAK), "--minutes", str(MINUTES),
         "--max-growth-mib-per-min", str(BOUND), "--json", str(out)],
        capture_output=True, text=True, timeout=MINUTES * 60 + 600)
    print(result.stdout)
    assert out.exists(), result.stdout[-4000:] + result.stderr[-4000:]
    report = json.loads(out.read_text())
    # The cluster's own account of a lost host (its log is long; these lines say why).
    why = [line for line in result.stderr.splitlines()
           if any(k in line for k in ("unhealthy", "was lost", "heartbeat", "answers as"))]
    message = "\n".join([report["table"], *report["failures"], result.stdout[-3000:],
                          "cluster log, on hosts' health:", *why[-40:]])
    assert result.returncode == 0 and report["passed"], message
    for client in report["clients"].values():
        assert client["done"] and client["exit"] == 0, message
        assert client["iterations"] >= 100 * MINUTES, message  # it did work all along
        assert client["compiles"] >= 2, message
