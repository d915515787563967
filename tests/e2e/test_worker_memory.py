"""A worker's buffers are bounded (--max_buffer_bytes; by default on CPU a share of the
host's memory): past the bound, uploads and launches are refused with RESOURCE_EXHAUSTED
naming it, the worker stays up, and the session goes on once it frees some arrays."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import switchyard
from conftest import client_prints, metric_at, peak_rss, reset_peak_rss, rss

MIB = 1 << 20

CLIENT = """
import json
import numpy as np
import jax, jax.numpy as jnp
import switchyard
switchyard.initialize()

def refusal(make):
    held = []
    try:
        for _ in range(64):
            held.append(make())
            held[-1].block_until_ready()
    except Exception as e:
        return len(held) - 1, str(e), held
    return len(held), "", held

device = jax.devices()[0]
# Uploads of 16 MiB each, past a 64 MiB bound.
uploads, up_error, held = refusal(
    lambda: jax.device_put(np.ones(4 << 20, np.float32), device))
del held
# Launches whose outputs are 16 MiB each.
launches, launch_error, held = refusal(
    lambda: jax.jit(lambda: jnp.ones(4 << 20, jnp.float32), device=device)())
del held
after = float(jnp.sum(jax.device_put(np.ones(1024, np.float32), device)))
print(json.dumps(dict(uploads=uploads, up_error=up_error, launches=launches,
                      launch_error=launch_error, after=after)), flush=True)
"""


def test_past_the_bound_uploads_and_launches_are_refused_and_the_worker_stays_up():
    with switchyard.LocalCluster(workers=1, devices_per_worker=1,
                                 flags=(f"--max_buffer_bytes={64 * MIB}",)) as cluster:
        worker = cluster.child_pid("worker", 0)
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(CLIENT)],
                              env={**os.environ, **cluster.env()}, text=True,
                              capture_output=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr[-4000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
        for kind in ("up", "launch"):
            error = result[f"{kind}_error"]
            assert "RESOURCE_EXHAUSTED" in error and "--max_buffer_bytes" in error, error
        # 64 MiB hold three or four 16 MiB arrays (a little is held besides).
        assert 2 <= result["uploads"] <= 4, result
        assert 2 <= result["launches"] <= 4, result
        assert result["after"] == 1024.0
        assert cluster.child_pid("worker", 0) == worker  # not restarted: it never died


def test_up_leaves_a_fifth_of_the_memory_to_the_processes_and_the_system():
    """`switchyard up` puts the proxy beside its workers: their default bounds together
    (workers' buffers, the proxy's staged host buffers) stay under 80% of the memory,
    three parts to the workers for one to the proxy (60% and 20%)."""
    with switchyard.LocalCluster(workers=2, devices_per_worker=1, metrics=True) as cluster:
        proxy = metric_at(cluster.metrics["proxy"], "switchyard_proxy_host_buffer_bytes_max")
        workers = [metric_at(cluster.metrics[f"worker-{i}"], "switchyard_worker_buffer_bytes_max")
                   for i in range(2)]
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert proxy > 0 and workers[0] == workers[1] > 0
    assert sum(workers) + proxy <= 0.8 * memory
    assert sum(workers) / proxy == pytest.approx(3, rel=0.01)


STREAMED = """
import numpy as np, jax, jax.numpy as jnp, switchyard
switchyard.initialize()
try:
    jax.device_put(np.ones(SIZE, np.uint8), jax.devices()[0]).block_until_ready()
    print("NOT REFUSED", flush=True)
except Exception as e:
    assert "RESOURCE_EXHAUSTED" in str(e) and "--max_buffer_bytes" in str(e), e
    print("REFUSED AT THE BOUND", flush=True)
assert float(jnp.sum(jnp.ones(4))) == 4.0
print("GOES ON", flush=True)
switchyard.shutdown()
"""


def test_an_upload_streamed_past_the_bound_is_refused_and_held_by_no_one():
    """An upload one device takes whole streams through the proxy in its window (the
    proxy charges it the window only), so the worker's bound is what refuses one larger
    than it: neither the proxy nor the worker holds the upload meanwhile."""
    bound = 256 * MIB
    with switchyard.LocalCluster(workers=1, devices_per_worker=1,
                                 flags=(f"--max_buffer_bytes={bound}",)) as cluster:
        pids = {"proxy": cluster.child_pid("proxy"), "worker": cluster.child_pid("worker", 0)}
        idle = {role: rss(pid) for role, pid in pids.items()}
        for pid in pids.values():
            reset_peak_rss(pid)
        client_prints(cluster, STREAMED.replace("SIZE", str(2 * bound)), "REFUSED AT THE BOUND",
                      "GOES ON")
        for role, pid in pids.items():
            assert peak_rss(pid) <= idle[role] + 192 * MIB, (role, idle[role] // MIB,
                                                             peak_rss(pid) // MIB)

