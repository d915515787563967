"""Memory comes back after sessions end: a client that holds 50k small arrays leaves the
proxy and the worker, a few seconds after it ends, about where they were before it
(glibc keeps what a process frees unless it is given back; common/heap_trim.h), and
rounds of such clients grow nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import switchyard
from conftest import client_prints, peak_rss, reset_peak_rss, rss

MIB = 1 << 20

CLIENT = """
import numpy as np, jax, switchyard
switchyard.initialize()
f = jax.jit(lambda x: [x + i for i in range(500)])
x = jax.device_put(np.ones(16, np.float32), jax.devices()[0])
held = []
for _ in range(100):
    held.extend(f(x))
jax.block_until_ready(held)
print("ARRAYS", len(held), flush=True)
switchyard.shutdown()
"""


def settles_below(pid: int, bound: int, timeout_s: float = 30) -> int:
    """The process's RSS once it is at most `bound`, or its last one after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while (now := rss(pid)) > bound and time.monotonic() < deadline:
        time.sleep(0.2)
    return now


def test_rounds_of_many_small_arrays_give_their_memory_back():
    with switchyard.LocalCluster(workers=1, devices_per_worker=1) as cluster:
        env = {**os.environ, **cluster.env()}
        proxy, worker = cluster.child_pid("proxy"), cluster.child_pid("worker", 0)
        proxy_idle = rss(proxy)
        worker_after_first = None
        for round_ in range(3):
            out = subprocess.run([sys.executable, "-c", CLIENT], env=env, capture_output=True,
                                 text=True, timeout=300)
            assert "ARRAYS 50000" in out.stdout, out.stderr[-3000:]
            # The proxy comes back to within 32 MiB of idle (it held ~60 MiB more per
            # round before, and never gave it back).
            proxy_now = settles_below(proxy, proxy_idle + 32 * MIB)
            assert proxy_now <= proxy_idle + 32 * MIB, (round_, proxy_idle, proxy_now)
            # The worker keeps what its first session left (the plugin's compiler paged
            # in, and heap its compile left: bench/worker_memory.py), and no more after
            # each further round.
            if worker_after_first is None:
                worker_after_first = settles_below(worker, 0, timeout_s=15)
                continue
            worker_now = settles_below(worker, worker_after_first + 48 * MIB)
            assert worker_now <= worker_after_first + 48 * MIB, (round_, worker_after_first,
                                                                  worker_now)


COMPILER = """
import numpy as np, jax, switchyard
switchyard.initialize()
f = jax.jit(lambda x: [x + i for i in range(500)])
jax.block_until_ready(f(jax.device_put(np.ones(16, np.float32), jax.devices()[0])))
print("COMPILED", flush=True)
switchyard.shutdown()
"""


def test_a_session_that_compiles_and_makes_few_arrays_gives_the_compile_heap_back():
    # Compiling this program took the worker ~500 MiB of heap that it freed but kept
    # resident: the session deleted too few buffers (501) to call for a trim. A compile
    # now counts as enough; what stays is the plugin's first-compile state (~100 MiB here).
    with switchyard.LocalCluster(workers=1, devices_per_worker=1) as cluster:
        env = {**os.environ, **cluster.env()}
        worker = cluster.child_pid("worker", 0)
        idle = rss(worker)
        out = subprocess.run([sys.executable, "-c", COMPILER], env=env, capture_output=True,
                             text=True, timeout=300)
        assert "COMPILED" in out.stdout, out.stderr[-3000:]
        bound = idle + 240 * MIB
        now = settles_below(worker, bound)
        assert now <= bound, (idle // MIB, now // MIB)


WARM_UP = """
import numpy as np, jax, switchyard
switchyard.initialize()
jax.block_until_ready(jax.jit(lambda x: x + 1)(jax.device_put(np.ones(1, np.float32))))
print("WARM", flush=True)
switchyard.shutdown()
"""

UPLOADER = """
import numpy as np, jax, jax.numpy as jnp, switchyard
switchyard.initialize()
a = np.arange(SIZE, dtype=np.uint8)
x = jax.device_put(a, jax.devices()[0])
total = int(jax.jit(lambda v: jnp.sum(v, dtype=jnp.uint32))(x))
assert total == int(a.sum(dtype=np.uint32)), total
y = x + np.uint8(1)
assert np.array_equal(np.asarray(y), a + np.uint8(1))
print("MOVED", flush=True)
switchyard.shutdown()
"""


@pytest.mark.parametrize("plane", ["bulk", "grpc"])
def test_an_upload_and_a_fetch_pass_through_the_proxy_in_a_window(plane):
    """A 1 GiB device_put to one device goes on to its worker as it arrives, and a 1 GiB
    fetch to the client as it comes from the worker: the proxy's peak RSS stays within
    512 MiB of where it was (it held the whole buffer, and more, before), over the data
    plane and over gRPC alike; and the proxy and the worker come back near where they
    were after."""
    size = 1 << 30
    flags = () if plane == "bulk" else ("--bulk_transfers=false",)
    with switchyard.LocalCluster(workers=1, devices_per_worker=1, flags=flags) as cluster:
        proxy, worker = cluster.child_pid("proxy"), cluster.child_pid("worker")
        idle = rss(proxy)
        # The worker's idle is taken once its plugin has compiled (a trivial program): the
        # compiler's code and first-use state stay for the worker's life
        # (bench/worker_memory.py), and are no transfer's.
        client_prints(cluster, WARM_UP, "WARM")
        worker_idle = settles_below(worker, 0, timeout_s=5)
        reset_peak_rss(proxy)  # the peak starts again from now
        client_prints(cluster, UPLOADER.replace("SIZE", str(size)), "MOVED", timeout=600)
        peak = peak_rss(proxy)
        assert peak <= idle + 512 * MIB, (plane, idle // MIB, peak // MIB)
        if plane == "bulk":
            # And both give it back to within 64 MiB (issue 34's goal): what they kept
            # for reuse (1 GiB on the worker) is unmapped once unused for
            # limits::kHostBytesKeptIdleMs (30 s).
            after = settles_below(proxy, idle + 64 * MIB, timeout_s=60)
            assert after <= idle + 64 * MIB, (idle // MIB, after // MIB)
            worker_after = settles_below(worker, worker_idle + 64 * MIB, timeout_s=60)
            print(f"RSS MiB: proxy {idle // MIB} -> {after // MIB},"
                  f" worker {worker_idle // MIB} -> {worker_after // MIB}")
            assert worker_after <= worker_idle + 64 * MIB, (worker_idle // MIB,
                                                            worker_after // MIB)


CHARGED = """
import numpy as np, jax, jax.numpy as jnp, switchyard
from jax.sharding import Mesh, NamedSharding, PartitionSpec
switchyard.initialize()
a = np.arange(SIZE, dtype=np.uint8)
x = jax.device_put(a, jax.devices()[0])
assert int(jnp.sum(x, dtype=jnp.uint32)) == int(a.sum(dtype=np.uint32))
print("STREAMED", flush=True)
del x
# Split in two, each shard larger than the bound: each streams on to its device.
split = NamedSharding(Mesh(np.array(jax.devices()[:2]), ("d",)), PartitionSpec("d"))
y = jax.device_put(np.concatenate([a, a]), split)
assert int(jnp.sum(y, dtype=jnp.uint32)) == 2 * int(a.sum(dtype=np.uint32)) % 2**32
print("SPLIT STREAMED", flush=True)
del y
# Replicated: streamed to one device, copied from there to the other.
both = NamedSharding(Mesh(np.array(jax.devices()[:2]), ("d",)), PartitionSpec())
z = jax.device_put(a, both)
for shard in z.addressable_shards:
    assert int(jnp.sum(shard.data, dtype=jnp.uint32)) == int(a.sum(dtype=np.uint32))
print("REPLICATED STREAMED", flush=True)
del z, shard
# Strided (a transposed view): gathered from the whole upload, so staged whole.
try:
    jax.device_put(a.reshape(2, -1).T, jax.devices()[0]).block_until_ready()
    print("NOT REFUSED", flush=True)
except Exception as e:
    assert "RESOURCE_EXHAUSTED" in str(e) and "--session_max_host_buffer_bytes" in str(e), e
    print("REFUSED WHOLE", flush=True)
assert float(jnp.sum(jnp.ones(4))) == 4.0
print("GOES ON", flush=True)
switchyard.shutdown()
"""


def test_an_upload_larger_than_the_session_bound_streams_and_only_a_whole_one_is_refused():
    """A streamed upload is charged its window, not its size: one larger than the session's
    host-buffer bound goes through to one device, split over two devices (a shard each
    larger than the bound) and replicated on both, while the same array strided (read
    whole on the proxy to gather it) is refused naming the bound, and the session goes on."""
    bound = 256 * MIB
    flags = (f"--session_max_host_buffer_bytes={bound}",)
    with switchyard.LocalCluster(workers=1, devices_per_worker=2, flags=flags) as cluster:
        client_prints(cluster, CHARGED.replace("SIZE", str(bound + 128 * MIB)), "STREAMED",
                      "SPLIT STREAMED", "REPLICATED STREAMED", "REFUSED WHOLE", "GOES ON")


SHARDS_AT_ONCE = """
import numpy as np, jax, jax.numpy as jnp, switchyard
from jax.sharding import Mesh, NamedSharding, PartitionSpec
switchyard.initialize()
a = np.arange(8 * PER, dtype=np.uint8)
split = NamedSharding(Mesh(np.array(jax.devices()[:8]), ("d",)), PartitionSpec("d"))
y = jax.device_put(a, split)
for i, shard in enumerate(sorted(y.addressable_shards, key=lambda s: s.index[0].start)):
    assert np.array_equal(np.asarray(shard.data)[:: 1 << 16], a[i * PER:(i + 1) * PER:1 << 16])
print("EIGHT PUT", flush=True)
switchyard.shutdown()
"""


def test_the_shards_of_a_split_upload_wait_their_turn_in_a_small_window():
    """jax sends the 8 shards of a split device_put at once, and the session puts them one
    at a time: those waiting their turn are read (and charged) only 8 MiB ahead, so eight
    80 MiB shards pass a 192 MiB session bound (at a whole 64 MiB window each they would
    need 8 x 64: the fourth was refused)."""
    shard = 80 * MIB
    flags = (f"--session_max_host_buffer_bytes={192 * MIB}",)
    with switchyard.LocalCluster(workers=1, devices_per_worker=8, flags=flags) as cluster:
        client_prints(cluster, SHARDS_AT_ONCE.replace("PER", str(shard)), "EIGHT PUT")
