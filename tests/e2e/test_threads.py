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
import time

import grpc
import pytest

import switchyard
from conftest import metric_at, read_line, wait_until
from switchyard import rm_pb2, rm_pb2_grpc

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
    assert {"sy-session-out", "sy-dispatch-out", "sy-lanes"} <= documented, documented
    with switchyard.LocalCluster(workers=2, devices_per_worker=2) as cluster:
        env = {**os.environ, **cluster.env()}
        client = subprocess.Popen([sys.executable, "-c", CLIENT], env=env,
                                  stdout=subprocess.PIPE, text=True)
        watchdog = threading.Timer(180, client.kill)  # a client that hangs fails the test
        watchdog.start()
        try:
            assert read_line(client).strip() == "READY"
            seen = {}
            for role, slice_index in (("rm", None), ("proxy", None), ("worker", 0),
                                      ("worker", 1)):
                pid = cluster.child_pid(role, slice_index)
                seen[(role, slice_index)] = {n for n in thread_names(pid) if n.startswith("sy-")}
            undocumented = {name for names in seen.values() for name in names} - documented
            assert not undocumented, f"threads not in docs/architecture.md: {undocumented}"
            # What a live session has, as documented.
            assert {"sy-session-out", "sy-fleet-watch", "sy-housekeeper", "sy-prober",
                    "sy-lanes"} <= seen[("proxy", None)], seen
            # Lanes to workers have no threads of their own (proxy/lane_stream.h).
            assert not {"sy-worker-in", "sy-worker-out"} & seen[("proxy", None)], seen
            assert {"sy-rm-link", "sy-lease-sweep", "sy-dispatch-out"} <= seen[("worker", 0)], seen
            assert "sy-rm-sweep" in seen[("rm", None)], seen
        finally:
            watchdog.cancel()
            client.kill()
            client.wait(timeout=30)


def test_waiting_key_value_gets_hold_no_threads():
    """Gets waiting for a key another host has not put yet cost the RM no thread each;
    the put answers them all, and one whose client goes away leaves the store."""
    with switchyard.LocalCluster(workers=1, devices_per_worker=1, metrics=True) as cluster:
        rm = cluster.child_pid("rm")
        before = len(thread_names(rm))
        stub = rm_pb2_grpc.ResourceManagerStub(grpc.insecure_channel(cluster.rm_address))

        def wait_for_waiting(count: int) -> None:
            wait_until(lambda: metric_at(cluster.metrics["rm"],
                                         "switchyard_rm_kv_waiting_gets") == count,
                       what=f"{count} gets waiting", interval=0.05)

        gets = [stub.KeyValueGet.future(rm_pb2.KeyValueGetRequest(key="late", timeout_ms=120_000),
                                        timeout=120) for _ in range(300)]
        wait_for_waiting(300)
        assert len(thread_names(rm)) <= before + 8, (before, len(thread_names(rm)))
        stub.KeyValuePut(rm_pb2.KeyValuePutRequest(key="late", value=b"here"), timeout=10)
        assert [get.result(timeout=30).value for get in gets] == [b"here"] * 300
        wait_for_waiting(0)

        gone = stub.KeyValueGet.future(rm_pb2.KeyValueGetRequest(key="never", timeout_ms=120_000))
        wait_for_waiting(1)
        gone.cancel()
        wait_for_waiting(0)
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as e:
            stub.KeyValueGet(rm_pb2.KeyValueGetRequest(key="never", timeout_ms=300), timeout=30)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "'never' was not set within 300ms" in e.value.details()
        assert time.monotonic() - started < 5
