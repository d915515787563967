"""The thread model in docs/architecture.md matches the running code: while a client
computes and fetches through a cluster, every thread a Switchyard process has named
("sy-...") is one the document's table lists, and the threads the table says a session
has are there."""

import os
import pathlib
import re
import subprocess
import sys
import threading

import switchyard

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "architecture.md"

CLIENT = """
import numpy as np, jax, switchyard
switchyard.initialize()
x = jax.device_put(np.arange(8, dtype=np.float32), jax.devices()[0])
y = jax.jit(lambda v: v * 2)(x)
np.testing.assert_array_equal(np.asarray(y), np.arange(8) * 2)
print("READY", flush=True)
import time; time.sleep(600)
"""


def documented_threads() -> set[str]:
    text = DOC.read_text()
    section = text[text.index("## Threads"):]
    return set(re.findall(r"`(sy-[a-z-]+)`", section))


def thread_names(pid: int) -> list[str]:
    names = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/comm") as f:
                names.append(f.read().strip())
        except FileNotFoundError:
            pass  # ended meanwhile
    return names


def test_every_named_thread_is_documented():
    documented = documented_threads()
    assert {"sy-session-out", "sy-worker-in", "sy-dispatch-out"} <= documented, documented
    with switchyard.LocalCluster(workers=2, devices_per_worker=2) as cluster:
        env = {**os.environ, **cluster.env()}
        client = subprocess.Popen([sys.executable, "-c", CLIENT], env=env,
                                  stdout=subprocess.PIPE, text=True)
        watchdog = threading.Timer(180, client.kill)  # a client that hangs fails the test
        watchdog.start()
        try:
            assert client.stdout.readline().strip() == "READY"
            seen = {}
            for role, slice_index in (("rm", None), ("proxy", None), ("worker", 0),
                                      ("worker", 1)):
                pid = cluster.child_pid(role, slice_index)
                seen[(role, slice_index)] = {n for n in thread_names(pid) if n.startswith("sy-")}
            undocumented = {name for names in seen.values() for name in names} - documented
            assert not undocumented, f"threads not in docs/architecture.md: {undocumented}"
            # What a live session has, as documented.
            assert {"sy-session-out", "sy-worker-in", "sy-fleet-watch", "sy-housekeeper",
                    "sy-prober"} <= seen[("proxy", None)], seen
            assert {"sy-rm-link", "sy-lease-sweep", "sy-dispatch-out"} <= seen[("worker", 0)], seen
            assert "sy-rm-sweep" in seen[("rm", None)], seen
        finally:
            watchdog.cancel()
            client.kill()
            client.wait(timeout=30)
