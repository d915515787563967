"""The fleet as real processes: registration, status, health after kill -9,
stable device ids across restarts, and the errors a user can provoke."""

import os
import re
import signal
import subprocess
import sys
import time
from concurrent import futures

import grpc
import pytest

import switchyard
from conftest import fleet, metric_at, read_line, rss, scrape, start_rm, tell, text_of, wait_until
from switchyard import common_pb2, rm_pb2, rm_pb2_grpc, worker_pb2, worker_pb2_grpc
from switchyard.cluster import free_port


def hosts(rm_address):
    return {(h["slice_index"], h["host_index"]): h
            for s in fleet(rm_address)["slices"] for h in s["hosts"]}


def device_ids(host):
    return [int(d["global_id"]) for d in host["devices"]]


def test_status_shows_two_slices_of_four_devices(rm, start_worker):
    start_worker(0)
    start_worker(1)
    f = fleet(rm.address)
    assert [s["slice_index"] for s in f["slices"]] == [0, 1]
    for s in f["slices"]:
        assert s["healthy"]
        [host] = s["hosts"]
        assert host["healthy"] and len(host["devices"]) == 4
        assert host["plugin"]["platform_name"] == "cpu"
        assert host["plugin"]["stablehlo_current_version"]
        # A single-host client (num_nodes 1); the plugin's own ids, for device assignments.
        assert host["plugin"]["num_nodes"] == 1
        assert [d.get("plugin_id", 0) for d in host["devices"]] == [0, 1, 2, 3]
    assert sorted(device_ids(f["slices"][0]["hosts"][0]) + device_ids(f["slices"][1]["hosts"][0])) \
        == list(range(8))
    table = subprocess.run([switchyard.find_binary(), "status",
                            f"--resource_manager_address={rm.address}"],
                           check=True, capture_output=True, text=True).stdout
    assert "2 slices, 2 hosts (2 healthy), 8 devices" in table
    # What each worker holds, as its heartbeats say (int64 is a string in JSON).
    reported = wait_until(lambda: all(
        int(h["resident_bytes"]) > 0 for s in fleet(rm.address)["slices"] for h in s["hosts"])
        and fleet(rm.address), 10, "the workers' memory in their heartbeats")
    for s in reported["slices"]:
        [host] = s["hosts"]
        assert 16 << 20 < int(host["resident_bytes"]) < 16 << 30, host
        assert int(host["buffer_bytes"]) == 0, host
    table = subprocess.run([switchyard.find_binary(), "status",
                            f"--resource_manager_address={rm.address}"],
                           check=True, capture_output=True, text=True).stdout
    header, *rows = [line.split() for line in table.splitlines()[1:4]]
    assert header[5:7] == ["RSS", "BUFFERS"], table
    assert all(re.fullmatch(r"\d+M|\d+\.\dG", row[5]) and row[6] == "0M" for row in rows), table


def test_killed_worker_is_unhealthy_within_5s_and_returns_with_same_ids(rm, start_worker):
    start_worker(0)
    victim = start_worker(1)
    before = hosts(rm.address)[(1, 0)]
    assert before["healthy"]

    victim.proc.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    while hosts(rm.address)[(1, 0)]["healthy"]:
        assert time.monotonic() - killed_at < 5, "still healthy 5 s after kill -9"
        time.sleep(0.1)
    assert hosts(rm.address)[(0, 0)]["healthy"]  # the other slice is untouched
    rm.wait_for("is unhealthy: no heartbeat")

    start_worker(1)  # a new process, a new port
    after = hosts(rm.address)[(1, 0)]
    assert after["healthy"]
    assert device_ids(after) == device_ids(before)
    assert after["address"] != before["address"]
    assert int(after["registrations"]) == 2


def test_a_stopped_worker_is_unhealthy_within_5s_and_rejoins_when_continued(rm, start_worker):
    # A host gone dark answers neither heartbeats nor the RM's question: down once the
    # question's window has passed (3 s), not later.
    start_worker(0)
    victim = start_worker(1)
    victim.proc.send_signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        while hosts(rm.address)[(1, 0)]["healthy"]:
            assert time.monotonic() - stopped_at < 5, "still healthy 5 s after SIGSTOP"
            time.sleep(0.1)
        assert time.monotonic() - stopped_at > 2  # not before the heartbeat timeout
    finally:
        victim.proc.send_signal(signal.SIGCONT)
    victim.wait_for("registering again")
    wait_until(lambda: hosts(rm.address)[(1, 0)]["healthy"], timeout=10,
               what="healthy again after SIGCONT")
    assert hosts(rm.address)[(0, 0)]["healthy"]


class SilentHost(worker_pb2_grpc.WorkerServicer):
    """A FAKE worker that registers and answers GetInfo as itself but sends no heartbeat:
    a real worker's heartbeat thread cannot be starved alone on purpose."""

    BOOT_ID = "silent0123456789"

    def __init__(self, rm_address: str):
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        worker_pb2_grpc.add_WorkerServicer_to_server(self, self.server)
        self.address = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()
        rm_pb2_grpc.ResourceManagerStub(grpc.insecure_channel(rm_address)).RegisterWorker(
            rm_pb2.RegisterWorkerRequest(
                protocol_version=1, address=self.address, slice_index=0, host_index=0,
                boot_id=self.BOOT_ID, plugin=common_pb2.PluginInfo(platform_name="cpu"),
                devices=[common_pb2.DeviceInfo(local_ordinal=0, kind="cpu")],
                hostname="fake", pid=0), timeout=10)

    def GetInfo(self, request, context):
        return worker_pb2.GetInfoResponse(address=self.address, boot_id=self.BOOT_ID,
                                          registered=True)


def test_a_silent_host_that_answers_as_itself_stays_up_until_it_stops_answering(rm):
    # A heartbeat delayed by a starved thread or a slow connection must not end a user's
    # job (CI once lost a loaded worker mid-soak): before the RM declares silence death,
    # it asks the host, and one that answers as itself is kept.
    host = SilentHost(rm.address)
    try:
        time.sleep(5)  # two and a half heartbeat timeouts without a heartbeat
        assert hosts(rm.address)[(0, 0)]["healthy"]
        rm.wait_for("answers as itself: kept")
        assert "is unhealthy" not in rm.output
    finally:
        host.server.stop(0)
    gone_at = time.monotonic()
    while hosts(rm.address)[(0, 0)]["healthy"]:
        assert time.monotonic() - gone_at < 5, "still healthy 5 s after its server stopped"
        time.sleep(0.1)
    rm.wait_for("its address no longer answers as it")


def test_a_paused_rm_does_not_declare_its_workers_dead(rm, start_worker):
    # A paused VM or a starved RM process misses heartbeats it was not running to take;
    # on waking it must not count them against the workers (CI saw an 18 s stall do so).
    workers = [start_worker(0), start_worker(1)]
    rm.proc.send_signal(signal.SIGSTOP)
    try:
        time.sleep(5)  # more than two heartbeat timeouts
    finally:
        rm.proc.send_signal(signal.SIGCONT)
    time.sleep(1.5)
    assert all(h["healthy"] for h in hosts(rm.address).values())
    assert "is unhealthy" not in rm.output
    assert not any("registering again" in w.output for w in workers)


def test_duplicate_registration_is_refused(rm, start_worker):
    holder = start_worker(0)
    duplicate = start_worker(0, 0, 0, 4, wait=False)
    assert duplicate.wait_exit() != 0
    assert "already held by the live worker at " + holder.address in duplicate.output
    assert hosts(rm.address)[(0, 0)]["address"] == holder.address


def test_worker_retries_a_missing_rm_then_gives_up(spawn, plugin):
    port = free_port()  # nothing listens here
    worker = spawn("worker", f"--resource_manager_address=127.0.0.1:{port}", "--server_port=0",
                   f"--pjrt_plugin={plugin}", "--register_timeout_s=2")
    worker.wait_for("not reachable (attempt 1")
    assert worker.wait_exit() != 0
    assert "retrying in" in worker.output
    assert "gave up" in worker.output


def test_worker_waits_for_an_rm_that_starts_later(spawn, plugin):
    port = free_port()
    worker = spawn("worker", f"--resource_manager_address=127.0.0.1:{port}", "--server_port=0",
                   f"--pjrt_plugin={plugin}")
    worker.wait_for("not reachable")
    spawn("rm", f"--server_port={port}")
    worker.wait_for("registered with the resource manager", timeout=30)


def test_worker_reregisters_after_rm_restart(spawn, plugin):
    port = free_port()
    rm = spawn("rm", f"--server_port={port}")
    rm.wait_for("listening")
    worker = spawn("worker", f"--resource_manager_address=127.0.0.1:{port}", "--server_port=0",
                   f"--pjrt_plugin={plugin}")
    worker.wait_for("registered with the resource manager")
    rm.stop()
    spawn("rm", f"--server_port={port}").wait_for("listening")
    worker.wait_for("no longer knows this worker", timeout=30)
    wait_until(lambda: hosts(f"127.0.0.1:{port}"), 30, "the worker registered again")


@pytest.mark.parametrize("make_plugin,expected", [
    (lambda tmp: str(tmp / "missing.so"), "does not exist"),
    (lambda tmp: (tmp / "text.so").write_text("not ELF") and str(tmp / "text.so"),
     "not a loadable shared library"),
])
def test_bad_plugin_is_a_clear_error(spawn, rm, tmp_path, make_plugin, expected):
    worker = spawn("worker", f"--resource_manager_address={rm.address}", "--server_port=0",
                   f"--pjrt_plugin={make_plugin(tmp_path)}")
    assert worker.wait_exit() == 1
    assert expected in worker.output


def test_library_that_is_not_a_pjrt_plugin(spawn, rm):
    import ctypes.util
    libz = None
    for name in ("z", "m"):
        found = ctypes.util.find_library(name)
        if found:
            libz = found
            break
    assert libz, "neither libz nor libm found"
    # find_library gives a soname; resolve it through the loader's own path list.
    path = next(p for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64",
                            "/usr/lib64") if os.path.exists(p := os.path.join(d, libz)))
    worker = spawn("worker", f"--resource_manager_address={rm.address}", "--server_port=0",
                   f"--pjrt_plugin={path}")
    assert worker.wait_exit() == 1
    assert "is not a PJRT plugin: it has no GetPjrtApi symbol" in worker.output


def test_taken_port_is_a_clear_error(spawn, rm, plugin):
    port = int(rm.address.split(":")[1])
    worker = spawn("worker", f"--resource_manager_address={rm.address}", f"--server_port={port}",
                   f"--pjrt_plugin={plugin}")
    assert worker.wait_exit() == 1
    assert "cannot listen on" in worker.output


def test_pathways_rm_flags_declare_the_fleet_and_refuse_workers_outside_it(spawn, plugin):
    # The flags a PathwaysJob manifest gives its resource manager, unchanged.
    port = free_port()
    rm = spawn("rm", f"--server_port={port}", "--node_type=resource_manager",
               "--instance_count=1", "--instance_type=cpu:2x2")
    rm.wait_for("resource manager listening")
    address = f"127.0.0.1:{port}"
    good = spawn("worker", f"--resource_manager_address={address}", "--server_port=0",
                 "--slice_index=0", f"--pjrt_plugin={plugin}", "--cpu_device_count=4")
    good.wait_for("registered with the resource manager")
    for args, reason in [
        (["--slice_index=1", "--cpu_device_count=4"], "outside the fleet's 1 slices"),
        (["--slice_index=0", "--host_index=1", "--cpu_device_count=2"],
         "would give its slice 6 devices"),
    ]:
        worker = spawn("worker", f"--resource_manager_address={address}", "--server_port=0",
                       f"--pjrt_plugin={plugin}", *args)
        assert worker.wait_exit() == 1, worker.output
        assert "does not match with the expected instances" in worker.output
        assert reason in worker.output
    assert fleet(address)["slices"][0]["hosts"][0]["healthy"]
    wrong_kind = start_rm(spawn, "--instance_type=tpuv5e:4")
    worker = spawn("worker", f"--resource_manager_address={wrong_kind.address}", "--server_port=0",
                   f"--pjrt_plugin={plugin}", "--cpu_device_count=4")
    assert worker.wait_exit() == 1
    assert "devices, not 'tpuv5e'" in worker.output


@pytest.mark.parametrize("args,message", [
    (["--node_type=worker"], "`switchyard rm` is the resource manager"),
    (["--instance_type=cpu"], "is not GENERATION:TOPOLOGY"),
    (["--instance_type=cpu:0x4"], "the topology must be positive dimensions"),
    (["--instance_count=-1"], "--instance_count must not be negative"),
])
def test_bad_pathways_rm_flags_are_clear_errors(spawn, args, message):
    rm = spawn("rm", "--server_port=0", *args)
    assert rm.wait_exit() in (1, 2)
    assert message in rm.output


def test_cli_usage_errors(spawn):
    assert spawn("frobnicate").wait_exit() == 2
    bad_flag = spawn("rm", "--no_such_flag=1")
    assert bad_flag.wait_exit() != 0
    status = spawn("status", f"--resource_manager_address=127.0.0.1:{free_port()}")
    assert status.wait_exit() == 1
    assert "cannot reach the resource manager" in status.output


@pytest.mark.parametrize("command,flags", [
    ("rm", ["--server_port", "--state_file"]),
    ("proxy", ["--resource_manager_address", "--num_elastic_slices"]),
    ("worker", ["--slice_index", "--pjrt_plugin", "--gcs_scratch_location"]),
    ("status", ["--json"]),
    ("cache", ["--compilation_cache_max_bytes"]),
    ("up", ["--workers", "--devices_per_worker"]),
])
def test_command_help_lists_that_commands_flags(spawn, command, flags):
    helped = spawn(command, "--help")
    assert helped.wait_exit() == 0
    assert f"usage: switchyard {command}" in helped.output
    for flag in flags:
        assert f"  {flag} (default: " in helped.output, helped.output
    assert "No flags matched" not in helped.output


def test_proxy_prints_pathways_ready_line(spawn, rm):
    proxy = spawn("proxy", "--server_port=0", f"--resource_manager_address={rm.address}")
    proxy.wait_for("IFRT proxy server started with status OK")


def test_up_starts_a_fleet_and_leaves_no_orphans(spawn, plugin):
    rm_port = free_port()
    up = spawn("up", "--workers", "2", "--devices-per-worker", "4", f"--rm_port={rm_port}",
               "--worker_port=0", f"--pjrt_plugin={plugin}")
    up.wait_for("local cluster ready")
    f = fleet(f"127.0.0.1:{rm_port}")
    assert [len(s["hosts"][0]["devices"]) for s in f["slices"]] == [4, 4]
    children = [int(h["pid"]) for s in f["slices"] for h in s["hosts"]]
    up.proc.send_signal(signal.SIGINT)
    assert up.wait_exit() == 0
    for pid in children:
        assert not os.path.exists(f"/proc/{pid}") or _is_zombie(pid), f"orphan {pid}"


OPEN_CLIENT = """
import sys, numpy as np, jax, switchyard
switchyard.initialize()
xs = [jax.jit(lambda v, k=k: v * k)(jax.device_put(np.ones(64, np.float32), d))
      for d in jax.devices() for k in range(8)]
jax.block_until_ready(xs)
switchyard.shutdown()
print("READY", flush=True)
sys.stdin.readline()
"""


def test_stopping_a_cluster_under_a_connected_client_stops_every_process_cleanly(spawn, plugin):
    # The workers may go before the proxy has closed the client's session, whose end
    # then writes to streams of workers that are gone (the race itself is pinned down
    # in tests/unit/proxy/worker_connection_test.cc).
    for _ in range(2):
        rm_port, proxy_port = free_port(), free_port()
        up = spawn("up", "--workers=2", "--devices-per-worker=2", f"--rm_port={rm_port}",
                   f"--proxy_port={proxy_port}", "--worker_port=0", f"--pjrt_plugin={plugin}")
        up.wait_for("local cluster ready")
        env = {**os.environ, "JAX_PLATFORMS": "proxy",
               "JAX_BACKEND_TARGET": f"grpc://127.0.0.1:{proxy_port}",
               "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS": "true"}
        client = subprocess.Popen([sys.executable, "-c", OPEN_CLIENT], env=env, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL)
        try:
            assert read_line(client).strip() == "READY"
            up.proc.send_signal(signal.SIGTERM)
            assert up.wait_exit() == 0
        finally:
            client.kill()
            client.wait()
        exits = [line for line in up.output.splitlines() if "exited:" in line]
        assert len(exits) == 4 and all("status 0" in line for line in exits), up.output


def test_up_killed_with_sigkill_takes_its_children_along(spawn, plugin):
    rm_port = free_port()
    up = spawn("up", "--workers=1", f"--rm_port={rm_port}", "--worker_port=0",
               f"--pjrt_plugin={plugin}")
    up.wait_for("local cluster ready")
    pids = [int(h["pid"]) for s in fleet(f"127.0.0.1:{rm_port}")["slices"] for h in s["hosts"]]
    up.proc.send_signal(signal.SIGKILL)
    up.wait_exit()
    wait_until(lambda: not any(os.path.exists(f"/proc/{p}") and not _is_zombie(p) for p in pids),
               timeout=10, what="the children of a SIGKILLed `up` gone")


def _is_zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_key_value_store_for_multi_host_bootstrap(rm):
    # What a multi-host GPU client's kv_put/kv_get callbacks go through.
    import threading

    import grpc

    from switchyard import rm_pb2, rm_pb2_grpc
    stub = rm_pb2_grpc.ResourceManagerStub(grpc.insecure_channel(rm.address))
    stub.KeyValuePut(rm_pb2.KeyValuePutRequest(key="slice/0/topology/0", value=b"\x01\x02"))
    got = stub.KeyValueGet(rm_pb2.KeyValueGetRequest(key="slice/0/topology/0"), timeout=5)
    assert got.value == b"\x01\x02"
    with pytest.raises(grpc.RpcError) as e:
        stub.KeyValuePut(rm_pb2.KeyValuePutRequest(key="slice/0/topology/0", value=b"x"))
    assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS
    with pytest.raises(grpc.RpcError) as e:
        stub.KeyValueGet(rm_pb2.KeyValueGetRequest(key="missing"), timeout=5)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as e:
        stub.KeyValueGet(rm_pb2.KeyValueGetRequest(key="missing", timeout_ms=100), timeout=5)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # A get waits for a put from another host.
    later = threading.Timer(0.2, lambda: stub.KeyValuePut(
        rm_pb2.KeyValuePutRequest(key="slice/0/nccl_clique", value=b"id")))
    later.start()
    got = stub.KeyValueGet(rm_pb2.KeyValueGetRequest(key="slice/0/nccl_clique", timeout_ms=5000),
                           timeout=10)
    later.join()
    assert got.value == b"id"


def test_prometheus_metrics_of_every_process(spawn, plugin):
    rm_port = free_port()
    rm = spawn("rm", f"--server_port={rm_port}", "--metrics_port=0")
    rm.wait_for("listening")
    worker = spawn("worker", f"--resource_manager_address=127.0.0.1:{rm_port}", "--server_port=0",
                   f"--pjrt_plugin={plugin}", "--cpu_device_count=2", "--metrics_port=0")
    worker.wait_for("registered with the resource manager")
    proxy = spawn("proxy", "--server_port=0", f"--resource_manager_address=127.0.0.1:{rm_port}",
                  "--metrics_port=0")
    proxy.wait_for("proxy listening")
    m = scrape(rm)
    assert m['switchyard_rm_hosts{state="healthy"}'] == 1 and m["switchyard_rm_devices"] == 2
    m = scrape(worker)
    assert m["switchyard_worker_registered"] == 1 and m["switchyard_worker_buffers"] == 0
    m = scrape(proxy)
    assert m["switchyard_proxy_sessions"] == 0
    assert m["switchyard_proxy_host_buffer_bytes"] == 0
    # Each process says what memory it holds.
    for process in (rm, worker, proxy):
        assert 1 << 20 < scrape(process)["process_resident_memory_bytes"] < 16 << 30
    worker.proc.send_signal(signal.SIGKILL)
    wait_until(lambda: scrape(rm)['switchyard_rm_hosts{state="unhealthy"}'] == 1, timeout=5,
               what="one host unhealthy in the RM's metrics", interval=0.2)


def test_rm_down_new_sessions_get_the_last_view_and_a_restart_keeps_ids(spawn, plugin, tmp_path):
    """Without `switchyard up`: the RM dies and stays down for a while."""
    rm_port, proxy_port = free_port(), free_port()
    state = tmp_path / "rm-state"
    rm = spawn("rm", f"--server_port={rm_port}", f"--state_file={state}")
    rm.wait_for("resource manager listening")
    address = f"127.0.0.1:{rm_port}"
    for s in (1, 0):  # joined out of order: ids follow join order, and must stay
        worker = spawn("worker", f"--resource_manager_address={address}", "--server_port=0",
                       f"--slice_index={s}", f"--pjrt_plugin={plugin}", "--cpu_device_count=2")
        worker.wait_for("registered with the resource manager")
    before = {k: device_ids(h) for k, h in hosts(address).items()}
    proxy = spawn("proxy", f"--server_port={proxy_port}", f"--resource_manager_address={address}")
    proxy.wait_for("slice 0 host 0")  # the proxy has its view of the fleet
    proxy.wait_for("slice 1 host 0")
    rm.stop(signal.SIGKILL)

    client = """
import jax, numpy as np, switchyard
switchyard.initialize()
print(sorted(d.id for d in jax.devices()), float(jax.numpy.ones(3).sum()))
"""
    env = {**os.environ, "JAX_PLATFORMS": "proxy",
           "JAX_BACKEND_TARGET": f"grpc://127.0.0.1:{proxy_port}"}
    try:
        out = subprocess.run([sys.executable, "-c", client], env=env, capture_output=True,
                             text=True, timeout=60)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(
            f"client hung; proxy:\n{proxy.output}\nclient:\n{text_of(e.stderr)}") from e
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[0] == "[0, 1, 2, 3] 3.0"

    restarted = spawn("rm", f"--server_port={rm_port}", f"--state_file={state}")
    restarted.wait_for("restored 4 device ids and 2 hosts")
    wait_until(lambda: all(h["healthy"] for h in hosts(address).values()),
               what="the workers registered again", interval=0.2)
    assert {k: device_ids(h) for k, h in hosts(address).items()} == before


def test_a_corrupt_state_file_stops_the_rm_from_starting(spawn, tmp_path):
    state = tmp_path / "rm-state"
    state.write_bytes(b"\xff\xff not a state")
    rm = spawn("rm", "--server_port=0", f"--state_file={state}")
    assert rm.wait_exit() != 0
    assert "is not an RM state" in rm.output


PLAIN_UP_CLIENT = """
import numpy as np
import pathwaysutils; pathwaysutils.initialize()
import jax, jax.numpy as jnp
from jax.experimental import colocated_python as cp
a = np.arange(16, dtype=np.float32).reshape(4, 4) + 4 * np.eye(4, dtype=np.float32)
b = np.ones(4, np.float32)
np.testing.assert_allclose(np.asarray(jnp.linalg.solve(a, b)), np.linalg.solve(a, b), rtol=1e-5)
print("LINALG OK", flush=True)
add_one = cp.colocated_python(lambda x: x + 1)
x = jax.device_put(np.float32(41), cp.colocated_cpu_devices(jax.devices())[0])
assert float(add_one(x)) == 42.0
print("COLOCATED OK", flush=True)
"""


def test_a_plain_up_has_kernels_and_colocated_python(spawn, plugin):
    """`switchyard up` with no --python and no $SWITCHYARD_WORKER_PYTHON: the workers find
    a Python with jaxlib themselves and say which, so jnp.linalg and colocated Python
    work with nothing beyond the target `up` prints."""
    env = {k: v for k, v in os.environ.items() if k != "SWITCHYARD_WORKER_PYTHON"}
    up = spawn("up", "--workers=1", "--devices-per-worker=2", f"--pjrt_plugin={plugin}",
               env={"SWITCHYARD_WORKER_PYTHON": ""})
    line = up.wait_for("JAX_BACKEND_TARGET=")
    printed = dict(word.split("=", 1) for word in line.split() if "=" in word)
    assert set(printed) == {"JAX_PLATFORMS", "JAX_BACKEND_TARGET",
                            "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS"}, line
    assert printed["JAX_BACKEND_TARGET"].startswith("grpc://unix:/"), line
    assert "Python for jaxlib's kernels and colocated Python: " in up.output, up.output
    client = subprocess.run([sys.executable, "-c", PLAIN_UP_CLIENT],
                            env={**env, **printed}, capture_output=True, text=True, timeout=300)
    assert "LINALG OK" in client.stdout and "COLOCATED OK" in client.stdout, (
        client.stdout + client.stderr[-3000:])


def test_a_worker_without_a_python_says_how_to_get_one(spawn, plugin, tmp_path):
    """Where no Python with jaxlib is found, the worker says so at start-up, and a program
    that needs jaxlib's kernels fails naming the flag."""
    up = spawn("up", "--workers=1", "--devices-per-worker=1", f"--pjrt_plugin={plugin}",
               "--python=none")
    line = up.wait_for("JAX_BACKEND_TARGET=")
    assert "--python=none: jaxlib's kernels (jnp.linalg, ...) and colocated Python are off" \
        in up.output, up.output
    printed = dict(word.split("=", 1) for word in line.split() if "=" in word)
    client = subprocess.run([sys.executable, "-c", PLAIN_UP_CLIENT],
                            env={**os.environ, **printed}, capture_output=True, text=True,
                            timeout=300)
    assert "LINALG OK" not in client.stdout
    assert "No FFI handler registered" in client.stderr and "--python=" in client.stderr, \
        client.stderr[-3000:]


def test_status_counts_the_restarts_a_supervisor_hides(spawn, plugin):
    """`up` restarts a killed worker within a second, before the RM sees it down: the
    RESTARTS column (and `restarts` in the JSON) is how an operator sees it. Its metrics
    stay where `up` said they are: the port it chose is kept."""
    with switchyard.LocalCluster(workers=1, devices_per_worker=1, metrics=True) as c:
        [host] = [h for s in c.status()["slices"] for h in s["hosts"]]
        assert int(host["restarts"]) == 0 and int(host["last_restart_age_ms"]) == -1
        os.kill(c.child_pid("worker", 0), signal.SIGKILL)

        def restarted() -> bool:
            [host] = [h for s in c.status()["slices"] for h in s["hosts"]]
            return int(host["restarts"]) == 1 and host["healthy"]

        wait_until(restarted, timeout=60, what="the worker restarted and healthy", interval=0.2)
        assert metric_at(c.metrics["worker-0"], "switchyard_worker_buffers") == 0
        table = subprocess.run([switchyard.find_binary(), "status",
                                f"--resource_manager_address={c.rm_address}"],
                               capture_output=True, text=True, timeout=30).stdout
        assert "RESTARTS" in table.splitlines()[1], table
        assert re.search(r"\b1 \(\d+s ago\)", table), table


def test_a_watch_of_changes_gets_the_fleet_then_only_the_slices_that_changed(rm, start_worker):
    # Simulated hosts: the real worker over a plugin with no device, cheap to start.
    workers = {s: start_worker(s, 0, 0, 1, "--simulate") for s in range(3)}
    channel = grpc.insecure_channel(rm.address)
    stub = rm_pb2_grpc.ResourceManagerStub(channel)
    stream = stub.WatchFleet(rm_pb2.WatchFleetRequest(changes_only=True), timeout=30)
    first = next(stream)
    assert sorted(s.slice_index for s in first.slices) == [0, 1, 2]
    workers[1].proc.send_signal(signal.SIGKILL)
    # Until slice 1 shows down, every message names slice 1 alone: nothing else changed.
    for message in stream:
        assert [s.slice_index for s in message.slices] == [1], message
        assert message.version > first.version
        if not message.slices[0].healthy:
            break
    stream.cancel()
    # A plain watch still gets whole fleets.
    whole = next(stub.WatchFleet(rm_pb2.WatchFleetRequest(), timeout=30))
    assert sorted(s.slice_index for s in whole.slices) == [0, 1, 2]
    channel.close()


HOLDER = """
import sys, jax, numpy as np, switchyard
switchyard.initialize()
x = jax.device_put(np.ones(1 << 20, np.float32), jax.devices()[0]).block_until_ready()
print("HOLDING", flush=True)
sys.stdin.readline()
"""


def test_status_shows_what_the_rm_and_each_proxy_hold():
    with switchyard.LocalCluster(workers=1, devices_per_worker=1) as cluster:
        proxy_pid, rm_pid = cluster.child_pid("proxy"), cluster.child_pid("rm")
        client = subprocess.Popen([sys.executable, "-c", HOLDER], env={**os.environ,
                                  **cluster.env()}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
        try:
            assert read_line(client).strip() == "HOLDING"
            # The proxy reports every 2 s: its session shows within a few reports.
            def one_session():
                now = fleet(cluster.rm_address)
                proxies = now.get("proxies", [])
                return len(proxies) == 1 and int(proxies[0]["sessions"]) == 1 and now

            f = wait_until(one_session, 15, "the proxy's report of its session")
            [proxy] = f["proxies"]
            assert int(proxy["pid"]) == proxy_pid, proxy
            assert abs(int(proxy["resident_bytes"]) - rss(proxy_pid)) < 64 << 20, proxy
            assert int(proxy["host_buffer_bytes"]) >= 0 and proxy["hostname"], proxy
            assert int(f["rm_pid"]) == rm_pid
            assert abs(int(f["rm_resident_bytes"]) - rss(rm_pid)) < 64 << 20, f
            table = subprocess.run([switchyard.find_binary(), "status",
                                    f"--resource_manager_address={cluster.rm_address}"],
                                   check=True, capture_output=True, text=True).stdout
            rows = {line.split()[0]: line.split() for line in table.splitlines()
                    if line.startswith(("resource-manager ", "proxy "))}
            assert rows["resource-manager"][2] == str(rm_pid), table
            assert rows["proxy"][2] == str(proxy_pid), table
            assert re.fullmatch(r"\d+M|\d+\.\dG", rows["proxy"][3]), table
            assert rows["proxy"][5] == "1", table  # its session
        finally:
            tell(client, "done")
            client.wait(timeout=60)
        wait_until(lambda: int(fleet(cluster.rm_address)["proxies"][0]["sessions"]) == 0, 15,
                   "the proxy's report that the session ended")
