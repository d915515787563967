"""Buffers between workers on the bulk data plane: a real JAX client moves arrays
across slices while the workers serve each other's large buffers on raw sockets
(a Unix socket beside the worker's own, or TCP), and the bytes arrive exact. With
`--bulk_transfers=false` the same run goes over gRPC. A stranger on the data plane's
port gets a refusal and nothing else, and the plane keeps serving. A holder killed while
its buffers move fails the move with DATA_LOSS, whole or not at all, and nothing hangs."""

import os
import random
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import proxy_address, read_line, scrape, start_rm, tell, text_of
from switchyard.cluster import free_port

CLIENT = """
import jax, numpy as np, switchyard
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
switchyard.initialize()
devs = jax.devices()
s0 = [d for d in devs if d.slice_index == 0]
s1 = [d for d in devs if d.slice_index == 1]
rng = np.random.default_rng(7)
# 9 MiB and 7 bytes' worth of uint8: more than one stream, an odd tail.
big = rng.integers(0, 255, size=9 * 2**20 + 7, dtype=np.uint8)
x = jax.device_put(big, s0[0])
y = jax.device_put(x, s1[1])
assert y.devices() == {s1[1]}
np.testing.assert_array_equal(np.asarray(y), big)
back = jax.device_put(jax.jit(lambda v: v + 1)(y), s0[1])
np.testing.assert_array_equal(np.asarray(back), big + 1)
# Sharded across slices.
a = rng.standard_normal((1024, 1024), dtype=np.float32)
m0, m1 = Mesh(np.array(s0), ("x",)), Mesh(np.array(s1), ("x",))
z = jax.device_put(jax.device_put(a, NamedSharding(m0, P("x"))), NamedSharding(m1, P(None, "x")))
np.testing.assert_array_equal(np.asarray(z), a)
# Fetches to the client: the proxy reads these from the worker's data plane (from
# 512 KiB), every dtype, sizes around the floor and the plane's chunks, sharded too.
for dtype, n in [(np.bool_, 3 << 20), (np.int8, 2**19), (np.uint8, 2**19 - 1),
                 (np.int8, 2**20), (np.uint8, 2**20 - 1),
                 (np.int16, 5 * 2**19 + 3), (np.float16, 2**20 + 1),
                 (jax.numpy.bfloat16, 3 * 2**20 + 5), (np.int32, 2**20 + 7), (np.uint32, 2**18),
                 (np.float32, 9 * 2**18 + 1), (np.complex64, 2**18 + 3),
                 (np.uint8, 0), (np.uint8, 1)]:
    v = rng.integers(0, 2, n).astype(dtype) if dtype == np.bool_ else \
        (rng.standard_normal(n) * 100).astype(dtype)
    got = np.asarray(jax.device_put(v, s1[0]))
    assert got.dtype == v.dtype and got.tobytes() == v.tobytes(), (dtype, n)
wide = rng.standard_normal((4096, 512), dtype=np.float32)
np.testing.assert_array_equal(np.asarray(jax.device_put(wide, NamedSharding(m0, P("x"))) * 1), wide)
# A pytree of sharded arrays (one request): one batch on the destination worker, the
# shards from 512 KiB offered by their holder in one call, the small one fetched alone.
many = [rng.standard_normal(2**18 + 1024 * i, dtype=np.float32) for i in range(4)] + \
    [rng.standard_normal(64, dtype=np.float32)]
moved = jax.device_put(jax.device_put(many, NamedSharding(m0, P("x"))), NamedSharding(m1, P("x")))
for got, want in zip(moved, many):
    assert got.devices() == set(s1)
    np.testing.assert_array_equal(np.asarray(got), want)
# Small buffers stay on gRPC (below the data plane's floor) and are just as exact.
small = np.arange(1000, dtype=np.int32)
np.testing.assert_array_equal(np.asarray(jax.device_put(jax.device_put(small, s0[0]), s1[0])),
                              small)
print("OK")
"""

BIG = 9 * 2**20 + 7


def refused(address: str, payload: bytes) -> bytes:
    """What the data plane answers `payload` with (it closes after a refusal)."""
    if address.startswith("unix:"):
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(address[len("unix:"):])
    else:
        host, port = address.rsplit(":", 1)
        conn = socket.create_connection((host, int(port)))
    with conn:
        conn.settimeout(10)
        conn.sendall(payload)
        reply = b""
        while chunk := conn.recv(4096):
            reply += chunk
    return reply


@pytest.mark.parametrize("plane", ["tcp", "unix", "off"])
def test_buffers_between_workers_are_exact_on_every_plane(spawn, plugin, tmp_path, plane):
    rm = start_rm(spawn)
    workers = []
    for s in (0, 1):
        where = ([f"--unix_socket={tmp_path}/w{s}.sock"] if plane == "unix"
                 else ["--server_port=0"])
        extra = ["--bulk_transfers=false"] if plane == "off" else []
        worker = spawn("worker", f"--resource_manager_address={rm.address}", *where,
                       f"--slice_index={s}", f"--pjrt_plugin={plugin}", "--cpu_device_count=2",
                       "--metrics_port=0", *extra)
        worker.wait_for("registered with the resource manager")
        workers.append(worker)
    proxy_where = ([f"--unix_socket={tmp_path}/proxy.sock"] if plane == "unix"
                   else ["--server_port=0"])
    proxy = spawn("proxy", *proxy_where, f"--resource_manager_address={rm.address}",
                  "--metrics_port=0", *(["--bulk_transfers=false"] if plane == "off" else []))
    proxy.wait_for("proxy listening")

    if plane != "off":
        line = workers[0].wait_for("bulk transfers on")
        address = line.split("bulk transfers on ")[1].split()[0]
        assert address.startswith("unix:") == (plane == "unix"), address
        # Strangers: not our framing, then our framing with a ticket nobody was given.
        answer = refused(address, b"GET / HTTP/1.0\r\n\r\n" + b"\0" * 22)
        assert answer[:4] == (3).to_bytes(4, "little")
        guess = b"SYBULK01" + os.urandom(16) + (0).to_bytes(8, "little") + \
            (1024).to_bytes(8, "little")
        reply = refused(address, guess)
        assert reply[:4] == (7).to_bytes(4, "little"), reply  # PERMISSION_DENIED
        assert b"ticket" in reply and len(reply) < 1100
        # The proxy's plane, where workers pull uploads from, refuses strangers alike.
        line = proxy.wait_for("bulk transfers on")
        proxy_plane = line.split("bulk transfers on ")[1].split()[0]
        assert proxy_plane.startswith("unix:") == (plane == "unix"), proxy_plane
        assert refused(proxy_plane, guess)[:4] == (7).to_bytes(4, "little")
    else:
        assert "bulk transfers on" not in workers[0].output + proxy.output

    target = proxy_address(proxy)
    env = {**os.environ, "JAX_PLATFORMS": "proxy", "JAX_BACKEND_TARGET": f"grpc://{target}"}
    try:
        out = subprocess.run([sys.executable, "-c", CLIENT], env=env, capture_output=True,
                             text=True, timeout=300)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"client hung:\n{text_of(e.stderr)}\n{proxy.output[-3000:]}") from e
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-4000:]

    metrics = [scrape(w) for w in workers]
    served = sum(m.get("switchyard_worker_bulk_bytes_served_total", 0) for m in metrics)
    pulled = sum(m["switchyard_worker_bulk_bytes_pulled_total"] for m in metrics)
    put_pulled = sum(m["switchyard_worker_bulk_put_bytes_total"] for m in metrics)
    assert sum(m["switchyard_worker_bulk_fallbacks_total"] for m in metrics) == 0
    assert sum(m["switchyard_worker_bulk_put_fallbacks_total"] for m in metrics) == 0
    # The arrays moved between slices went in batches; the fetches below the stream
    # bound (the 0- and 1-byte arrays) on the proxy's operation streams.
    assert sum(m["switchyard_worker_batched_transfers_total"] for m in metrics) >= 4, metrics
    assert sum(m["switchyard_worker_stream_reads_total"] for m in metrics) >= 2, metrics
    offered = sum(m["switchyard_worker_offered_at_once_total"] for m in metrics)
    assert offered == 0 if plane == "off" else offered >= 8, metrics
    p = scrape(proxy)
    proxy_bulk = p['switchyard_proxy_worker_bytes_read_total{path="bulk"}']
    put_bulk = p['switchyard_proxy_worker_bytes_written_total{path="bulk"}']
    assert p["switchyard_proxy_bulk_fallbacks_total"] == 0
    assert p["switchyard_proxy_bulk_put_fallbacks_total"] == 0
    assert p['switchyard_proxy_worker_bytes_read_total{path="grpc"}'] > 0  # the small ones
    assert p['switchyard_proxy_worker_bytes_written_total{path="grpc"}'] > 0  # likewise
    # Freed transfer buffers kept for reuse, within their bound (2 GiB at most).
    for m in [p, *metrics]:
        kept = m.get("switchyard_proxy_host_bytes_kept", m.get("switchyard_worker_host_bytes_kept"))
        assert kept is not None and 0 <= kept <= 2 << 30, m
    if plane == "off":
        assert served == 0 and pulled == 0 and proxy_bulk == 0 and put_bulk == 0
        assert all("switchyard_worker_bulk_bytes_served_total" not in m for m in metrics)
        assert p["switchyard_proxy_bulk_bytes_served_total"] == 0
    else:
        # At least both big moves and the big fetches, and every byte served was a byte
        # pulled, by a worker or by the proxy.
        assert served == pulled + proxy_bulk and pulled >= 2 * BIG, (metrics, p)
        # The big uploads were pulled by their workers from the proxy's plane.
        assert p["switchyard_proxy_bulk_bytes_served_total"] == put_pulled == put_bulk, (metrics, p)
        assert put_bulk >= BIG + 1024 * 1024 * 4 + 4096 * 512 * 4, p
        assert proxy_bulk >= 2 * BIG + 4096 * 512 * 4, p
        assert sum(m["switchyard_worker_bulk_failures_total"] for m in metrics) == 2  # strangers


def test_a_data_plane_out_of_the_proxys_reach_sends_the_bytes_over_grpc(spawn, plugin, tmp_path):
    rm = start_rm(spawn)
    worker = spawn("worker", f"--resource_manager_address={rm.address}",
                   f"--unix_socket={tmp_path}/w.sock", f"--pjrt_plugin={plugin}",
                   "--cpu_device_count=2", "--metrics_port=0")
    worker.wait_for("registered with the resource manager")
    # As if the worker were on another host: its plane's socket is not there to reach.
    os.unlink(f"{tmp_path}/w.sock.bulk")
    proxy = spawn("proxy", "--server_port=0",
                  f"--resource_manager_address={rm.address}", "--metrics_port=0")
    proxy.wait_for("proxy listening")
    client = """
import jax, numpy as np, switchyard
switchyard.initialize()
a = np.arange(3 << 20, dtype=np.uint8)
for k in range(3):
    np.testing.assert_array_equal(np.asarray(jax.device_put(a, jax.devices()[k % 2]) + k), a + k)
print("OK")
"""
    env = {**os.environ, "JAX_PLATFORMS": "proxy",
           "JAX_BACKEND_TARGET": f"grpc://{proxy_address(proxy)}"}
    out = subprocess.run([sys.executable, "-c", client], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-4000:]
    p = scrape(proxy)
    # Tried once, then never again for this worker: each fetch came over gRPC.
    assert p["switchyard_proxy_bulk_fallbacks_total"] == 1, p
    assert p['switchyard_proxy_worker_bytes_read_total{path="bulk"}'] == 0
    assert p['switchyard_proxy_worker_bytes_read_total{path="grpc"}'] >= 3 * (3 << 20)
    assert proxy.output.count("its data plane is out of reach") == 1, proxy.output[-3000:]


def test_a_proxy_plane_out_of_the_workers_reach_sends_uploads_over_grpc(spawn, plugin, tmp_path):
    rm = start_rm(spawn)
    worker = spawn("worker", f"--resource_manager_address={rm.address}", "--server_port=0",
                   f"--pjrt_plugin={plugin}", "--cpu_device_count=2", "--metrics_port=0")
    worker.wait_for("registered with the resource manager")
    proxy = spawn("proxy", f"--unix_socket={tmp_path}/proxy.sock",
                  f"--resource_manager_address={rm.address}", "--metrics_port=0")
    proxy.wait_for("proxy listening")
    # As if the worker were on another host: the proxy's plane is not there to reach.
    os.unlink(f"{tmp_path}/proxy.sock.bulk")
    client = """
import jax, numpy as np, switchyard
switchyard.initialize()
a = np.arange(3 << 20, dtype=np.uint8)
for k in range(3):
    np.testing.assert_array_equal(np.asarray(jax.device_put(a + k, jax.devices()[k % 2])), a + k)
print("OK")
"""
    env = {**os.environ, "JAX_PLATFORMS": "proxy",
           "JAX_BACKEND_TARGET": f"grpc://unix:{tmp_path}/proxy.sock"}
    out = subprocess.run([sys.executable, "-c", client], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-4000:]
    p, w = scrape(proxy), scrape(worker)
    # Offered once, then never again to this worker: each upload went over gRPC.
    assert p["switchyard_proxy_bulk_put_fallbacks_total"] == 1, p
    assert w["switchyard_worker_bulk_put_fallbacks_total"] == 1, w
    assert p['switchyard_proxy_worker_bytes_written_total{path="bulk"}'] == 0
    assert p['switchyard_proxy_worker_bytes_written_total{path="grpc"}'] >= 3 * (3 << 20)
    assert proxy.output.count("cannot reach this proxy's data plane") == 1, proxy.output[-3000:]


UPLOADER = """
import jax, numpy as np, switchyard
switchyard.initialize()
a = np.ones(256 << 20, dtype=np.uint8)
print("UPLOADING", flush=True)
while True:
    jax.device_put(a, jax.devices()[0]).block_until_ready()
"""


def test_a_client_killed_mid_upload_leaves_nothing_behind(spawn, plugin, tmp_path):
    rm = start_rm(spawn)
    worker = spawn("worker", f"--resource_manager_address={rm.address}",
                   f"--unix_socket={tmp_path}/w.sock", f"--pjrt_plugin={plugin}",
                   "--cpu_device_count=1", "--metrics_port=0")
    worker.wait_for("registered with the resource manager")
    proxy = spawn("proxy", f"--unix_socket={tmp_path}/proxy.sock",
                  f"--resource_manager_address={rm.address}", "--metrics_port=0")
    proxy.wait_for("proxy listening")
    env = {**os.environ, "JAX_PLATFORMS": "proxy",
           "JAX_BACKEND_TARGET": f"grpc://unix:{tmp_path}/proxy.sock"}
    client = subprocess.Popen([sys.executable, "-c", UPLOADER], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert read_line(client).strip() == "UPLOADING"
    # Some kills land while the worker pulls an upload the client is still sending.
    time.sleep(0.5 + random.random())
    client.kill()
    client.wait(timeout=30)
    deadline = time.monotonic() + 30
    while True:
        p, w = scrape(proxy), scrape(worker)
        if p["switchyard_proxy_sessions"] == 0 and w["switchyard_worker_buffers"] == 0:
            break
        assert time.monotonic() < deadline, (p, w)
        time.sleep(0.2)
    assert proxy.proc.poll() is None and worker.proc.poll() is None
    # And the next client's uploads go on the plane as before.
    before = p['switchyard_proxy_worker_bytes_written_total{path="bulk"}']
    out = subprocess.run([sys.executable, "-c", """
import jax, numpy as np, switchyard
switchyard.initialize()
a = np.arange(5 << 20, dtype=np.uint8)
np.testing.assert_array_equal(np.asarray(jax.device_put(a, jax.devices()[0])), a)
print("OK")
"""], env=env, capture_output=True, text=True, timeout=120)
    assert "OK" in out.stdout, out.stderr[-3000:]
    after = scrape(proxy)['switchyard_proxy_worker_bytes_written_total{path="bulk"}']
    assert after - before == 5 << 20


MOVER = """
import sys, time, jax, numpy as np, switchyard
switchyard.initialize()
devs = jax.devices()
s0 = [d for d in devs if d.slice_index == 0]
s1 = [d for d in devs if d.slice_index == 1]
a = np.arange(64 << 20, dtype=np.uint8)
x = jax.device_put(a, s0[0])
x.block_until_ready()
checksum = jax.jit(lambda v: jax.numpy.sum(v, dtype=jax.numpy.uint32))
expected = int(a.sum(dtype=np.uint32))
print("MOVING", flush=True)
deadline = time.monotonic() + 60
moves = 0
fetch = sys.argv[1] == "fetch"
upload = sys.argv[1] == "upload"
while time.monotonic() < deadline:
    try:
        if upload:  # the holder pulls from the proxy's data plane
            y = jax.device_put(a + np.uint8(moves % 7), s0[0])
            assert int(checksum(y)) == int((a + np.uint8(moves % 7)).sum(dtype=np.uint32))
        elif fetch:  # to the client, through the proxy's reads from the holder
            y = x + np.uint8(moves % 7)
            assert (np.asarray(y) == a + np.uint8(moves % 7)).all()  # whole, or an error
        else:
            y = jax.device_put(x, s1[0])
            # Checked where it lands (a fetch to the client would take most of the time).
            assert int(checksum(y)) == expected  # whole, or an error: never part
        moves += 1
    except Exception as e:
        print("FAILED", moves, str(e).replace("\\n", " ")[:600], flush=True)
        break
# The surviving worker still serves.
z = jax.device_put(np.ones(4, np.float32), s1[1])
print("SURVIVOR", float(np.asarray(z).sum()), flush=True)
"""


@pytest.mark.parametrize("plane,what", [("tcp", "move"), ("unix", "move"), ("unix", "fetch"),
                                        ("tcp", "upload")])
def test_a_holder_killed_while_its_buffers_move_is_data_loss_and_nothing_hangs(
        spawn, plugin, tmp_path, plane, what):
    rm = start_rm(spawn)
    workers = []
    for s in (0, 1):
        where = ([f"--unix_socket={tmp_path}/w{s}.sock"] if plane == "unix"
                 else ["--server_port=0"])
        worker = spawn("worker", f"--resource_manager_address={rm.address}", *where,
                       f"--slice_index={s}", f"--pjrt_plugin={plugin}", "--cpu_device_count=2",
                       "--metrics_port=0")
        worker.wait_for("registered with the resource manager")
        workers.append(worker)
    proxy = spawn("proxy", "--server_port=0",
                  f"--resource_manager_address={rm.address}")
    proxy.wait_for("proxy listening")
    env = {**os.environ, "JAX_PLATFORMS": "proxy",
           "JAX_BACKEND_TARGET": f"grpc://{proxy_address(proxy)}"}
    client = subprocess.Popen([sys.executable, "-c", MOVER, what], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert read_line(client).strip() == "MOVING"
        # A while into the moves: some kills land on the data plane mid-buffer, some on
        # the offer, some between moves; each must end the same way.
        time.sleep(1.0 + random.random())
        workers[0].proc.send_signal(signal.SIGKILL)
        out, err = client.communicate(timeout=120)
    except subprocess.TimeoutExpired as e:
        client.kill()
        raise AssertionError(f"the client hung:\n{client.communicate()[1][-3000:]}") from e
    assert client.returncode == 0, err[-3000:]
    failed = next(line for line in out.splitlines() if line.startswith("FAILED"))
    print(failed)
    assert "DATA_LOSS" in failed, failed
    assert "SURVIVOR 4.0" in out, out
    assert workers[1].proc.poll() is None, workers[1].output[-3000:]
    scrape(workers[1])  # and answers


def test_a_chosen_bulk_port_is_used_and_a_taken_one_stops_the_worker(spawn, plugin, rm):
    port = free_port()
    worker = spawn("worker", f"--resource_manager_address={rm.address}", "--server_port=0",
                   f"--pjrt_plugin={plugin}", "--cpu_device_count=2", f"--bulk_port={port}")
    assert f"bulk transfers on 127.0.0.1:{port}" in worker.wait_for("bulk transfers on")
    worker.wait_for("registered with the resource manager")
    second = spawn("worker", f"--resource_manager_address={rm.address}", "--server_port=0",
                   "--slice_index=1", f"--pjrt_plugin={plugin}", "--cpu_device_count=2",
                   f"--bulk_port={port}")
    assert second.wait_exit() != 0
    assert f"--bulk_port={port}" in second.output and "Address already in use" in second.output, \
        second.output[-2000:]


HUGE_CLIENT = """
import jax, jax.numpy as jnp, switchyard
switchyard.initialize()
devs = jax.devices()
s0 = next(d for d in devs if d.slice_index == 0)
s1 = next(d for d in devs if d.slice_index == 1)
ROWS, COLS = 2**15 + 3, 2**16 + 1  # 2 GiB and 6 MiB, odd past every chunk and stream

def pattern():  # made where it runs: no 2 GiB through the client
    r = jax.lax.broadcasted_iota(jnp.uint32, (ROWS, COLS), 0)
    c = jax.lax.broadcasted_iota(jnp.uint32, (ROWS, COLS), 1)
    return ((r * 131 + c * 7 + (r >> 3) * (c >> 11)) & 0xFF).astype(jnp.uint8)

x = jax.jit(pattern, out_shardings=jax.sharding.SingleDeviceSharding(s0))()
x.block_until_ready()
print("MADE", x.nbytes, flush=True)
input()
y = jax.device_put(x, s1)
y.block_until_ready()
print("MOVED", flush=True)
input()
del x
same = jax.jit(lambda y: jnp.array_equal(y, pattern()),
               out_shardings=jax.sharding.SingleDeviceSharding(s1))(y)
assert bool(same), "the bytes differ"
print("OK", flush=True)
"""


def test_a_buffer_past_2_gib_moves_exact_with_three_copies_per_byte(spawn, plugin, rm, tmp_path):
    """Offsets and lengths past 2**31 on the plane, bit-exact (compared on the device it
    arrived on); and the workers' copy counter says 3 per byte (docs/performance.md):
    device memory -> staging, -> socket, socket -> the new buffer's memory."""
    workers = []
    for s in (0, 1):
        worker = spawn("worker", f"--resource_manager_address={rm.address}",
                       f"--unix_socket={tmp_path}/w{s}.sock", f"--slice_index={s}",
                       f"--pjrt_plugin={plugin}", "--cpu_device_count=1", "--metrics_port=0")
        worker.wait_for("registered with the resource manager")
        workers.append(worker)
    proxy = spawn("proxy", f"--unix_socket={tmp_path}/proxy.sock",
                  f"--resource_manager_address={rm.address}", "--metrics_port=0")
    proxy.wait_for("proxy listening")
    env = {**os.environ, "JAX_PLATFORMS": "proxy",
           "JAX_BACKEND_TARGET": f"grpc://unix:{tmp_path}/proxy.sock"}
    client = subprocess.Popen([sys.executable, "-c", HUGE_CLIENT], env=env, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    try:
        def copied():
            return sum(scrape(w)["switchyard_worker_bytes_copied_total"] for w in workers)

        line = read_line(client)
        assert line.startswith("MADE"), client.communicate(timeout=60)[1][-3000:]
        size = int(line.split()[1])
        assert size > 2**31
        before = copied()
        tell(client, "")
        moved = read_line(client).strip()
        assert moved == "MOVED", client.communicate(timeout=60)[1][-3000:]
        # The holder counts its last sends once `send` returns, which may be a moment
        # after the reader has the bytes.
        deadline = time.monotonic() + 10
        while (per_byte := (copied() - before) / size) < 2.999 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert 2.999 <= per_byte < 3.01, per_byte
        out, err = client.communicate("\n", timeout=300)
    except subprocess.TimeoutExpired as e:
        client.kill()
        raise AssertionError(f"client hung:\n{client.communicate()[1][-3000:]}") from e
    assert client.returncode == 0 and "OK" in out, err[-4000:]
    pulled = sum(scrape(w)["switchyard_worker_bulk_bytes_pulled_total"] for w in workers)
    assert pulled == size
