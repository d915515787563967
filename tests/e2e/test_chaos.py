"""Chaos: two clients, two tenants of one proxy with shares 1:2, train across the same
four slices while workers are killed at random (never the last slice standing), and the
resource manager and the proxy once each.
No client crashes or hangs; every step succeeds or fails with DATA_LOSS (a lost slice)
or UNAVAILABLE (the lost proxy); afterwards the workers hold nothing.

CI runs SWITCHYARD_CHAOS_SECONDS (default 150) of it; a soak is the same test with a
larger value, e.g. SWITCHYARD_CHAOS_SECONDS=1800 ./dev test -k chaos."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import switchyard
from conftest import stdout_of, worker_buffers

SECONDS = float(os.environ.get("SWITCHYARD_CHAOS_SECONDS", "150"))
PERIOD = 20.0  # a worker dies at a random point of every period
HERE = os.path.dirname(os.path.abspath(__file__))


TOKENS = {"alice": "alice-chaos-token", "bob": "bob-chaos-token"}


class Client:
    def __init__(self, cluster, name: str, token: str):
        self.name = name
        self.lines: list[dict] = []
        self.last = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "chaos_client.py"), "--seconds", str(SECONDS),
             "--name", name], env={**os.environ, **cluster.env(), "SWITCHYARD_TOKEN": token},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in stdout_of(self.proc):
            if line.startswith("{"):
                self.lines.append(json.loads(line))
                self.last = time.monotonic()


def test_two_tenants_train_through_kills_of_workers_the_rm_and_the_proxy(tmp_path):
    rng = random.Random(7)
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{tenant} sha256:{hashlib.sha256(token.encode()).hexdigest()}\n"
                              for tenant, token in TOKENS.items()))
    with switchyard.LocalCluster(workers=4, devices_per_worker=2,
                                 flags=(f"--tokens_file={tokens}",
                                        "--tenant_shares=alice:1,bob:2")) as cluster:
        clients = [Client(cluster, tenant, token) for tenant, token in TOKENS.items()]
        start = time.monotonic()
        # Workers die at a random point of every period; the RM and the proxy once each.
        events = [(PERIOD * k + rng.uniform(0, PERIOD * 0.8), "worker")
                  for k in range(int(SECONDS // PERIOD))]
        events += [(SECONDS * 0.35, "rm"), (SECONDS * 0.65, "proxy")]
        events = [e for e in sorted(events) if e[0] < SECONDS - 5]
        done_events = []
        for at, role in events:
            while time.monotonic() - start < at:
                time.sleep(0.1)
                for c in clients:  # nobody hangs: every client makes progress or reports
                    assert time.monotonic() - c.last < 60, f"{c.name} silent for 60 s"
            try:
                if role == "worker":
                    slice_index = rng.randrange(4)
                    pid = cluster.child_pid("worker", slice_index)
                    done_events.append(f"worker {slice_index}")
                else:
                    pid = cluster.child_pid(role)
                    done_events.append(role)
                os.kill(pid, signal.SIGKILL)
            except LookupError:
                pass  # still restarting from the last kill: spare it (never the last slice)
        for c in clients:
            c.proc.wait(timeout=SECONDS + 120)
        print("events:", done_events)
        for c in clients:
            summary = c.lines[-1]
            print(c.name, summary)
            assert c.proc.returncode == 0 and summary.get("done"), (c.name, c.lines[-5:])
            counts = summary["counts"]
            assert summary["others"] == [], (c.name, summary["others"])
            assert counts["ok"] >= 20, (c.name, counts, done_events)
            if "proxy" in done_events:
                assert counts["reconnects"] >= 1, (c.name, counts)
        # Both tenants' launches ran as theirs, through every restart (each worker counts
        # device time by tenant since it started).
        tenants = set()
        for address in cluster.worker_addresses():
            with switchyard.WorkerClient(address) as worker:
                tenants |= set(worker.stats().device_seconds)
        assert set(TOKENS) <= tenants, tenants
        # What the clients held is freed on every worker.
        deadline = time.monotonic() + 60
        while worker_buffers(cluster) != 0:
            assert time.monotonic() < deadline, f"{worker_buffers(cluster)} buffers left"
            time.sleep(0.5)
