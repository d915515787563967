"""Host callbacks when things go wrong: a client that dies inside a callback, a program
whose key nobody serves, and a raw HostCallbacks.Serve stream that misbehaves. What
works is in proxy_client.py's `host_callbacks` check; here the fleet must stay up and
the next client must be served."""

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import grpc
import pytest

import switchyard
from conftest import stdout_of
from switchyard import host_callback_pb2, host_callback_pb2_grpc

HERE = pathlib.Path(__file__).parent


@pytest.fixture(scope="module")
def cluster():
    with switchyard.LocalCluster(workers=1, devices_per_worker=2) as c:
        yield c


def client(cluster, body: str, **kwargs) -> subprocess.Popen:
    code = textwrap.dedent("""
        import sys, time
        import numpy as np
        import switchyard
        switchyard.initialize()
        import jax, jax.numpy as jnp
    """) + textwrap.dedent(body)
    env = {**os.environ, "JAX_BACKEND_TARGET": cluster.target}
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def run_client(cluster, body: str, timeout=120) -> subprocess.CompletedProcess:
    proc = client(cluster, body)
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


CALLBACK_WORKS = """
    f = jax.jit(lambda v: jax.pure_callback(lambda a: a + 1,
                                            jax.ShapeDtypeStruct((), jnp.float32), v))
    assert float(f(jnp.float32(41))) == 42.0
    print("SERVED", flush=True)
    switchyard.shutdown()
"""


def hanging_client(cluster):
    """A client whose program waits in a callback that never returns ("IN CALLBACK")."""
    return client(cluster, """
        def hang(a):
            print("IN CALLBACK", flush=True)
            time.sleep(3600)
            return a
        jax.jit(lambda v: jax.pure_callback(hang, jax.ShapeDtypeStruct((), jnp.float32), v))(
            jnp.float32(1)).block_until_ready()
    """)


def test_a_client_killed_inside_a_callback_leaves_the_fleet_serving(cluster):
    worker = cluster.status()["slices"][0]["hosts"][0]["address"]
    stuck = hanging_client(cluster)
    deadline = time.monotonic() + 120
    for line in stdout_of(stuck):
        if "IN CALLBACK" in line:
            break
        assert time.monotonic() < deadline
    # The worker's device thread now waits on this client; kill it mid-call.
    stuck.send_signal(signal.SIGKILL)
    stuck.wait(timeout=30)
    result = run_client(cluster, CALLBACK_WORKS)
    assert result.returncode == 0 and "SERVED" in result.stdout, result.stderr[-3000:]
    hosts = cluster.status()["slices"][0]["hosts"]
    assert [h["healthy"] for h in hosts] == [True] and hosts[0]["address"] == worker, hosts


def test_a_program_whose_key_nobody_serves_fails_with_a_clear_error(cluster):
    result = run_client(cluster, """
        from switchyard import host_callbacks
        # A key the proxy has never heard of, as from a client that has gone.
        host_callbacks._Server.register = lambda self, functions: "f" * 32
        f = jax.jit(lambda v: jax.pure_callback(np.sin, jax.ShapeDtypeStruct((), jnp.float32), v))
        try:
            f(jnp.float32(1)).block_until_ready()
        except Exception as e:
            print("ERROR", e, flush=True)
        switchyard.shutdown()
    """)
    assert "ERROR" in result.stdout, result.stderr[-3000:]
    assert "no client serves this program's host callbacks" in result.stdout, result.stdout
    assert run_client(cluster, CALLBACK_WORKS).returncode == 0


def test_a_misbehaving_serve_stream_gets_errors_and_the_proxy_stays_up(cluster):
    channel = grpc.insecure_channel(cluster.target.split("://", 1)[-1])
    stub = host_callback_pb2_grpc.HostCallbacksStub(channel)
    pb = host_callback_pb2
    replies = [
        pb.HostCallbackReply(register_key=""),                 # empty: refused
        pb.HostCallbackReply(register_key="k" * 300),          # too long: refused
        pb.HostCallbackReply(register_key="mine"),             # registered
        pb.HostCallbackReply(register_key="mine"),             # taken: refused
        pb.HostCallbackReply(result=pb.HostCallbackResult(call_id=987654)),  # unknown: ignored
        pb.HostCallbackReply(),                                # empty: ignored
    ]
    events = list(stub.Serve(iter(replies), timeout=30))
    kinds = [e.WhichOneof("kind") for e in events]
    assert kinds == ["error", "error", "registered", "error"], events
    assert events[2].registered == "mine"
    assert "another stream" in events[3].error
    # A second stream may take the key once the first has ended.
    events = list(stub.Serve(iter([pb.HostCallbackReply(register_key="mine")]), timeout=30))
    assert [e.WhichOneof("kind") for e in events] == ["registered"], events
    channel.close()
    assert run_client(cluster, CALLBACK_WORKS).returncode == 0


def test_a_proxy_killed_while_a_worker_waits_in_a_callback_leaves_the_worker_serving(cluster):
    # The worker may run the launch on the stream's reader thread, which then never
    # reads the stream's end: the waiting call must notice the proxy went by itself.
    worker = cluster.status()["slices"][0]["hosts"][0]["address"]
    stuck = hanging_client(cluster)
    for line in stdout_of(stuck):
        if "IN CALLBACK" in line:
            break
    os.kill(cluster.child_pid("proxy"), signal.SIGKILL)  # `up` restarts it
    stuck.kill()
    stuck.wait(timeout=30)
    result = run_client(cluster, CALLBACK_WORKS, timeout=60)
    assert result.returncode == 0 and "SERVED" in result.stdout, result.stderr[-3000:]
    hosts = cluster.status()["slices"][0]["hosts"]
    assert [h["healthy"] for h in hosts] == [True] and hosts[0]["address"] == worker, hosts
