"""A shared pool: a proxy started with --virtual_slices leases each session slices from
the RM, queues sessions while the pool is full, and gives the slices back when a session
ends. Real client processes (`JAX_PLATFORMS=proxy`) against rm + 4 one-device workers
(4 slices) + a proxy."""

import hashlib
import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from conftest import (
    dashboard_url,
    fleet,
    proxy_address,
    read_line,
    start_rm,
    stdout_of,
    tell,
    wait_until,
)
from switchyard.cluster import free_port

# A client that holds its session open and takes commands on stdin: `compute` runs a
# program and prints its result, `quit` closes the session and exits.
HOLDER = textwrap.dedent("""
    import json, sys
    import switchyard
    switchyard.initialize()
    import jax, jax.numpy as jnp, numpy as np
    devices = jax.devices()
    print("DEVICES", json.dumps([d.slice_index for d in devices]), flush=True)
    for line in sys.stdin:
        if line.strip() == "compute":
            try:
                x = jax.device_put(jnp.arange(8.0), devices[0])
                ok = np.allclose(np.asarray(x * 3 + 1), np.arange(8.0) * 3 + 1)
                # One write a line: the client's own logs share the pipe.
                sys.stdout.write("RESULT " + ("ok" if ok else "wrong") + "\\n")
                sys.stdout.flush()
            except Exception as e:  # the reason goes to the test
                sys.stdout.write("RESULT error: " + str(e).replace("\\n", " ") + "\\n")
                sys.stdout.flush()
        elif line.strip() == "quit":
            break
    switchyard.shutdown()
    print("CLOSED", flush=True)
""")


class Client:
    def __init__(self, target: str, virtual_slices: str | None = None, token: str | None = None):
        env = {**os.environ, "JAX_PLATFORMS": "proxy", "JAX_BACKEND_TARGET": target}
        env.pop("SWITCHYARD_TOKEN", None)
        env.pop("SWITCHYARD_VIRTUAL_SLICES", None)
        if token is not None:
            env["SWITCHYARD_TOKEN"] = token
        if virtual_slices is not None:
            env["SWITCHYARD_VIRTUAL_SLICES"] = virtual_slices
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER], env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        self.lines: queue.Queue = queue.Queue()
        self.printed: list[str] = []  # every line so far, logs included
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in stdout_of(self.proc):
            self.printed.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def line(self, prefix: str, timeout: float = 60) -> str:
        """The next output line starting with `prefix` (other lines are logs)."""
        deadline = time.monotonic() + timeout
        seen = []
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            seen.append(line)
            if line.startswith(prefix):
                return line[len(prefix):].strip()
        raise AssertionError(f"no {prefix!r} line; the client printed:\n" + "".join(seen))

    def devices(self, timeout: float = 60) -> list[int]:
        return json.loads(self.line("DEVICES", timeout))

    def compute(self) -> str:
        tell(self.proc, "compute")
        return self.line("RESULT")

    def quit(self):
        tell(self.proc, "quit")
        self.line("CLOSED")
        self.proc.wait(timeout=30)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def clients():
    started: list[Client] = []

    def _start(target, virtual_slices=None, token=None) -> Client:
        client = Client(target, virtual_slices, token)
        started.append(client)
        return client

    yield _start
    for client in started:
        client.kill()


def start_pool(spawn, plugin, slices: int, *rm_flags: str, virtual_slices="cpu:1",
               proxy_flags=(), rm_port: int = 0):
    """`rm_port`: for a test that restarts the RM on its port (0: one the RM chooses)."""
    rm = start_rm(spawn, *rm_flags, port=rm_port)
    for index in range(slices):
        worker = spawn("worker", f"--resource_manager_address={rm.address}", "--server_port=0",
                       f"--slice_index={index}", f"--pjrt_plugin={plugin}",
                       "--cpu_device_count=1")
        worker.wait_for("registered with the resource manager")
    proxy = spawn("proxy", "--server_port=0", f"--resource_manager_address={rm.address}",
                  f"--virtual_slices={virtual_slices}", *proxy_flags)
    proxy.wait_for("IFRT proxy server started with status OK")
    proxy.target = f"grpc://{proxy_address(proxy)}"
    proxy.rm = rm
    return proxy


@pytest.fixture
def pool(spawn, plugin):
    return start_pool(spawn, plugin, 4)


def leases(proxy) -> dict:
    return fleet(proxy.rm.address)["leases"]


def test_a_fifth_session_waits_in_the_queue_and_is_placed_when_a_lease_ends(pool, clients):
    holders = [clients(pool.target) for _ in range(4)]
    placed = [holder.devices() for holder in holders]
    # Each session sees one slice, its own.
    assert sorted(slices[0] for slices in placed) == [0, 1, 2, 3], placed
    assert all(len(slices) == 1 for slices in placed)
    assert pool.output.count("unplaced -> placed") == 4

    fifth = clients(pool.target)
    pool.wait_for("waiting for 1 slices in the pool's queue, position 1")
    table = leases(pool)
    assert len(table["held"]) == 4 and len(table["queued"]) == 1, table

    holders[1].quit()
    assert fifth.devices() == placed[1]
    assert fifth.compute() == "ok"
    for holder in (holders[0], holders[2], holders[3]):
        assert holder.compute() == "ok"
    wait_until(lambda: not leases(pool)["queued"], what="an empty queue")


def test_a_client_killed_while_queued_leaves_the_queue(pool, clients):
    holders = [clients(pool.target) for _ in range(4)]
    for holder in holders:
        holder.devices()
    waiting = clients(pool.target)
    pool.wait_for("position 1")
    waiting.kill()
    wait_until(lambda: not leases(pool)["queued"], what="the dead client's request to leave")
    holders[0].quit()
    wait_until(lambda: len(leases(pool)["held"]) == 3, what="the lease to end")


def test_a_notebook_that_reconnects_leaves_the_other_sessions_alone(pool, clients, tmp_path):
    other = clients(pool.target)
    other.devices()
    notebook = textwrap.dedent("""
        import switchyard, jax, jax.numpy as jnp, numpy as np
        switchyard.initialize()
        for round in range(3):
            x = jnp.arange(4.0) + round
            assert np.allclose(np.asarray(x * 2), (np.arange(4.0) + round) * 2)
            print("ROUND", round, [d.slice_index for d in jax.devices()], flush=True)
            switchyard.shutdown()  # the notebook disconnects; the next cell connects again
    """)
    env = {**os.environ, "JAX_PLATFORMS": "proxy", "JAX_BACKEND_TARGET": pool.target}
    env.pop("SWITCHYARD_VIRTUAL_SLICES", None)
    result = subprocess.run([sys.executable, "-c", notebook], env=env, capture_output=True,
                            text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("ROUND") == 3, result.stdout
    assert other.compute() == "ok"
    wait_until(lambda: len(leases(pool)["held"]) == 1, what="the notebook's leases to end")
    assert pool.output.count("unplaced -> placed") == 4  # the other's, and one a round


def test_a_session_may_ask_for_other_slices(pool, clients):
    two = clients(pool.target, virtual_slices="cpu:1,cpu:1")
    assert len(two.devices()) == 2
    assert two.compute() == "ok"
    table = leases(pool)
    assert [len(lease["slice_indices"]) for lease in table["held"]] == [2]


@pytest.mark.parametrize("asked, reason", [
    ("cpu:1,cpu:1,cpu:1,cpu:1,cpu:1", "no room for"),
    ("cpu:2", "no room for"),
    ("h200:1", "no room for"),
    ("cpu", "is not GENERATION:TOPOLOGY"),
])
def test_a_session_asking_for_what_the_pool_cannot_hold_is_refused(pool, asked, reason):
    env = {**os.environ, "JAX_PLATFORMS": "proxy", "JAX_BACKEND_TARGET": pool.target,
           "SWITCHYARD_VIRTUAL_SLICES": asked}
    code = ("import switchyard; switchyard.initialize(connection_timeout_s=5); import jax; "
            "jax.devices()")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode != 0
    assert reason in result.stderr, result.stderr[-3000:]
    assert not leases(pool)["held"] and not leases(pool)["queued"]


def test_a_lease_held_too_long_is_taken_back_while_another_waits(spawn, plugin, clients):
    pool = start_pool(spawn, plugin, 1, "--lease_max_hold=3s")
    first = clients(pool.target)
    assert first.devices() == [0]
    time.sleep(4)  # past the limit, but nobody waits: the lease stays
    assert first.compute() == "ok"
    second = clients(pool.target)
    assert second.devices(timeout=30) == [0]
    pool.rm.wait_for("--lease_max_hold")
    error = first.compute()
    assert error.startswith("error:") and "--lease_max_hold" in error, error
    assert second.compute() == "ok"
    # The failed session still takes its arrays' destructions (the client batches them
    # and logs an error for each one refused), and refuses the rest.
    assert first.compute().startswith("error:")
    assert not [line for line in first.printed if "Unrecognized response" in line], first.printed


def test_a_higher_priority_preempts_a_lower_one(spawn, plugin, clients, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{tenant} sha256:{hashlib.sha256(tenant.encode()).hexdigest()}\n"
                              for tenant in ("dev", "prod")))
    pool = start_pool(spawn, plugin, 1, "--tenant_priorities=prod:10",
                      proxy_flags=(f"--tokens_file={tokens}",))
    dev = clients(pool.target, token="dev")
    assert dev.devices() == [0]
    assert dev.compute() == "ok"
    prod = clients(pool.target, token="prod")
    assert prod.devices(timeout=30) == [0]
    assert prod.compute() == "ok"
    error = dev.compute()
    assert error.startswith("error:") and "preempted by a session of tenant 'prod'" in error, error
    # A grace period later the preempted session ends, and its lease is gone.
    pool.wait_for("session 1 (dev) ended", timeout=30)
    assert [lease["tenant"] for lease in leases(pool)["held"]] == ["prod"]


def test_an_idle_session_gives_its_slices_back(spawn, plugin, clients):
    pool = start_pool(spawn, plugin, 1, proxy_flags=("--session_idle_timeout=2s",))
    idle = clients(pool.target)
    assert idle.devices() == [0]
    waiting = clients(pool.target)
    assert waiting.devices(timeout=30) == [0]
    assert waiting.compute() == "ok"
    pool.wait_for("--session_idle_timeout=2s")
    error = idle.compute()
    assert error.startswith("error:") and "idle for" in error, error


def test_a_lease_outlives_an_rm_restart(spawn, plugin, clients, tmp_path):
    state = tmp_path / "rm-state"
    pool = start_pool(spawn, plugin, 2, f"--state_file={state}", rm_port=free_port())
    first = clients(pool.target)
    slices = first.devices()
    pool.rm.stop(signal.SIGKILL)
    rm = spawn(*pool.rm.args)  # the same port and state file
    rm.wait_for("resource manager listening")
    assert first.compute() == "ok"  # the session goes on while its lease is asked again
    wait_until(lambda: [lease["slice_indices"]
                        for lease in fleet(pool.rm.address)["leases"]["held"]] == [slices],
               what="the same slice leased again")
    # The other slice is still free: a second session gets it at once.
    second = clients(pool.target)
    assert second.devices() != slices
    assert first.compute() == "ok"


def test_status_shows_leases_and_the_queue(pool, clients):
    holders = [clients(pool.target) for _ in range(4)]
    for holder in holders:
        holder.devices()
    clients(pool.target)
    pool.wait_for("position 1")
    import switchyard

    out = subprocess.run([switchyard.find_binary(), "status",
                          f"--resource_manager_address={pool.rm.address}"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    assert "4 leases held, 1 queued" in out, out
    assert "queued#1" in out and "proxy session" in out, out


# Keeps the session's one device busy with a chain of programs until a line on stdin
# (double-buffered: the next round is dispatched before the last is waited for).
LOADER = textwrap.dedent("""
    import sys, threading
    import switchyard
    switchyard.initialize()
    import jax, jax.numpy as jnp, numpy as np
    f = jax.jit(lambda x: jnp.tanh(x @ x) * 0.5)
    x = jax.device_put(np.eye(384, dtype=np.float32), jax.devices()[0])
    f(x).block_until_ready()
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    print("READY", flush=True)
    last = None
    while not stop.is_set():
        for _ in range(16):
            x = f(x)
        if last is not None:
            last.block_until_ready()
        last = x
    x.block_until_ready()
""")


@pytest.mark.parametrize("one_proxy", [False, True], ids=["a proxy each", "one proxy"])
def test_tenants_share_a_device_by_their_shares(spawn, plugin, tmp_path, one_proxy):
    """Two tenants, each through a proxy of its own or both through one (no leases), keep
    one device busy; with the RM's --tenant_shares=light:1,heavy:3 the worker gives
    `heavy` about three times the device time of `light`. Through one proxy, each session
    has its own operation stream to the worker (a lane), so the worker sees both tenants'
    launches waiting. A loose bound: this checks the mechanism, from the RM's flag through
    the proxy to the worker's order of launches; bench/run.py --only shares measures it."""
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{tenant} sha256:{hashlib.sha256(tenant.encode()).hexdigest()}\n"
                              for tenant in ("light", "heavy")))
    first = start_pool(spawn, plugin, 1, "--tenant_shares=light:1,heavy:3",
                       "--metrics_port=0", virtual_slices="",
                       proxy_flags=(f"--tokens_file={tokens}",))
    second_target = first.target
    if not one_proxy:
        second = spawn("proxy", "--server_port=0",
                       f"--resource_manager_address={first.rm.address}", f"--tokens_file={tokens}")
        second.wait_for("IFRT proxy server started with status OK")
        second_target = f"grpc://{proxy_address(second)}"
    address = fleet(first.rm.address)["slices"][0]["hosts"][0]["address"]
    loaders = []
    for tenant, target in (("light", first.target), ("heavy", second_target)):
        env = {**os.environ, "JAX_PLATFORMS": "proxy", "JAX_BACKEND_TARGET": target,
               "SWITCHYARD_TOKEN": tenant}
        env.pop("SWITCHYARD_VIRTUAL_SLICES", None)
        loaders.append(subprocess.Popen([sys.executable, "-c", LOADER], env=env, text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    try:
        for loader in loaders:
            assert read_line(loader).strip() == "READY"
        from switchyard.worker_client import WorkerClient
        with WorkerClient(address) as worker:
            def both_computing():  # the account from when both tenants' programs run
                seconds = dict(worker.stats().device_seconds)
                return seconds if {"light", "heavy"} <= seconds.keys() else None

            before = wait_until(both_computing, 60, "both tenants computing")
            time.sleep(4)  # the window the shares are measured over
            after = dict(worker.stats().device_seconds)
        for loader in loaders:
            loader.communicate("stop\n", timeout=60)
            assert loader.returncode == 0
    finally:
        for loader in loaders:
            loader.kill()
    light = after["light"] - before.get("light", 0)
    heavy = after["heavy"] - before.get("heavy", 0)
    assert light > 0 and 2.0 < heavy / light < 4.5, (light, heavy)
    # The RM's dashboard shows the same account, each device's busy time, and the
    # latest programs with their tenants.
    import urllib.request
    with urllib.request.urlopen(f"{dashboard_url(first.rm)}/api/status", timeout=10) as r:
        shown = json.load(r)["stats"][address]
    seconds = shown["device_seconds"]
    assert seconds["heavy"] >= after["heavy"] and seconds["light"] >= after["light"], seconds
    assert float(shown["device_busy_seconds"]["0"]) >= 0.9 * (light + heavy), shown
    recent = shown["recent_launches"]
    assert recent and {r["tenant"] for r in recent} <= {"light", "heavy"}, recent
    assert all("lambda" in r["program"] and r["device_seconds"] > 0 for r in recent), recent
