"""Colocated Python (jax.experimental.colocated_python) with stock clients against a
real local cluster (rm + 2 workers x 2 CPU devices + proxy): the functions run in each
worker's sidecar (python -m switchyard.sidecar), never silently in the client."""

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

import switchyard
from conftest import client_prints, read_line, wait_until

HERE = pathlib.Path(__file__).parent


@pytest.fixture(scope="module")
def writable(tmp_path_factory):
    """Sidecars see the file system read-only: the checkpoint writer needs a place."""
    return tmp_path_factory.mktemp("colocated-writable")


@pytest.fixture(scope="module")
def cluster(writable):
    with switchyard.LocalCluster(workers=2, devices_per_worker=2,
                                 flags=(f"--sidecar_writable_paths={writable}",)) as c:
        yield c


def writable_directory(writable, name):
    directory = writable / name
    directory.mkdir()
    return str(directory)


def run(cluster, script, *args, timeout=600):
    env = {**os.environ, "JAX_BACKEND_TARGET": cluster.target,
           "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS": "true"}
    return subprocess.run([sys.executable, str(HERE / script), *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("init", ["pathwaysutils", "switchyard"])
def test_colocated_python(cluster, writable, init):
    from colocated_client import CHECKS
    result = run(cluster, "colocated_client.py", "--init", init,
                 writable_directory(writable, f"session-{init}"))
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    for check in CHECKS:
        assert f"PASS {check}" in result.stdout, result.stdout + result.stderr[-4000:]
    assert wait_for_no_sidecars(cluster), "the session ended but its sidecars did not"


STRINGS_PAST_THE_BOUND = """
import jax, numpy as np, switchyard
jax.config.update("jax_platforms", "proxy,cpu")
switchyard.initialize()
from jax.experimental import colocated_python as cp
cpu = cp.colocated_cpu_devices(jax.devices())

@cp.colocated_python
def repeat(x):
    import jax
    import numpy as np
    data = np.asarray(x.addressable_shards[0].data)
    return jax.device_put(np.strings.multiply(data, 8), x.sharding)

def fetch(x):
    return list(np.asarray(x.addressable_shards[0].data))

words = np.array(["x" * 1000] * 256, dtype=np.dtypes.StringDType())
small = repeat(jax.device_put(words[:4], cpu[0]))
assert fetch(small) == ["x" * 8000] * 4
print("SMALL", flush=True)
large = repeat(jax.device_put(words, cpu[0]))  # 2 MB of contents
try:
    fetch(large)
    print("FETCHED PAST THE BOUND", flush=True)
except Exception as e:
    assert "RESOURCE_EXHAUSTED" in str(e) and "--session_max_host_buffer_bytes" in str(e), e
    print("REFUSED AT THE BOUND", flush=True)
assert fetch(small) == ["x" * 8000] * 4
print("GOES ON", flush=True)
switchyard.shutdown()
"""


def test_a_string_array_fetch_past_the_session_bound_is_refused():
    """A string array's fetch is sized only once its contents are read: it is charged
    then, and one past the session's host-buffer bound is refused naming the bound while
    the session goes on."""
    flags = ("--session_max_host_buffer_bytes=1048576",)
    with switchyard.LocalCluster(workers=1, devices_per_worker=1, flags=flags) as cluster:
        client_prints(cluster, STRINGS_PAST_THE_BOUND, "SMALL", "REFUSED AT THE BOUND", "GOES ON")


def sidecars(cluster):
    """Pids of the workers' sidecar processes."""
    workers = {cluster.child_pid("worker", s) for s in range(2)}
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"switchyard.sidecar" in command and parent in workers:
            found.append(int(entry.name))
    return found


def wait_for_no_sidecars(cluster, timeout=20):
    deadline = time.monotonic() + timeout
    while sidecars(cluster):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


HANGS = """
import sys, jax, numpy as np
jax.config.update("jax_platforms", "proxy,cpu")
import pathwaysutils; pathwaysutils.initialize()
from jax.experimental import colocated_python as cp

@cp.colocated_python
def hang(x):
    import time
    time.sleep(600)
    return x

hang = hang.specialize(out_specs_fn=lambda x: x)
y = hang(jax.device_put(np.ones(2, np.float32), jax.devices()[0]))
print("CALLED", flush=True)
y.block_until_ready()
"""


def test_a_client_that_goes_away_mid_call_stops_its_sidecar(cluster, writable, tmp_path):
    """The session's end stops a sidecar stuck in a function; the worker's stream goes on
    and the next session's calls run."""
    script = tmp_path / "hangs.py"
    script.write_text(HANGS)
    env = {**os.environ, "JAX_BACKEND_TARGET": cluster.target,
           "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS": "true"}
    client = subprocess.Popen([sys.executable, str(script)], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert read_line(client).startswith("CALLED")
        wait_until(lambda: sidecars(cluster), 60, "no sidecar started", interval=0.2)
    finally:
        client.kill()
        client.wait()
    assert wait_for_no_sidecars(cluster), "the sidecar outlived its session"
    started = time.monotonic()
    result = run(cluster, "colocated_client.py", "--init", "pathwaysutils",
                 writable_directory(writable, "after-a-client-went"))
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    assert time.monotonic() - started < 300


def test_a_cluster_without_python_says_so(tmp_path, monkeypatch):
    """A worker started with --python=none refuses colocated calls clearly."""
    script = tmp_path / "no_python.py"
    script.write_text(
        "import jax, numpy as np\n"
        "jax.config.update('jax_platforms', 'proxy,cpu')\n"
        "import pathwaysutils; pathwaysutils.initialize()\n"
        "from jax.experimental import colocated_python as cp\n"
        "f = cp.colocated_python(lambda x: x)\n"
        "try:\n"
        "    f(jax.device_put(np.ones(2), jax.devices()[0])).block_until_ready()\n"
        "except Exception as e:\n"
        "    print('ERROR', e)\n")
    monkeypatch.setenv("SWITCHYARD_WORKER_PYTHON", "none")
    with switchyard.LocalCluster(workers=1, devices_per_worker=1) as c:
        result = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=300,
            env={**os.environ, "JAX_BACKEND_TARGET": c.target,
                 "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS": "true"})
    assert "ERROR" in result.stdout and "--python" in result.stdout, (result.stdout
                                                                      + result.stderr[-3000:])


def test_a_killed_proxy_mid_call_frees_its_sidecar(tmp_path):
    """kill -9 of the proxy while a function runs: the client gets an error, the worker's
    stream sees its caller gone and stops the sidecar, and the restarted proxy serves."""
    script = tmp_path / "hangs.py"
    script.write_text(HANGS + "\n")
    with switchyard.LocalCluster(workers=2, devices_per_worker=2,
                                 flags=(f"--sidecar_writable_paths={tmp_path}",)) as c:
        env = {**os.environ, "JAX_BACKEND_TARGET": c.target,
               "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS": "true"}
        client = subprocess.Popen([sys.executable, str(script)], env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert read_line(client).startswith("CALLED")
            wait_until(lambda: sidecars(c), 60, "no sidecar started", interval=0.2)
            os.kill(c.child_pid("proxy"), signal.SIGKILL)
            _, err = client.communicate(timeout=120)
            assert client.returncode != 0 and "UNAVAILABLE" in err, err[-2000:]
        finally:
            client.kill()
        assert wait_for_no_sidecars(c, timeout=30), "a dead proxy's sidecar lived on"
        result = run(c, "colocated_client.py", "--init", "pathwaysutils", str(tmp_path))
        assert result.returncode == 0, result.stdout + result.stderr[-4000:]


def test_the_data_loading_example(cluster):
    """examples/colocated_data.py: each host's sidecar makes its slice's batches."""
    example = HERE.parent.parent / "examples" / "colocated_data.py"
    result = subprocess.run([sys.executable, str(example), "--target", cluster.target,
                             "--steps", "5"], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS": "true"})
    assert result.returncode == 0 and "OK: 2 hosts" in result.stdout, (
        result.stdout + result.stderr[-4000:])
