"""Stock JAX through the proxy: real client processes (`JAX_PLATFORMS=proxy`)
against a real local cluster (rm + 2 workers x 4 CPU devices + proxy); every
result is compared with JAX's own CPU backend inside the client."""

import os
import pathlib
import subprocess
import sys

import pytest

import switchyard
from conftest import worker_buffers
from proxy_client import CHECKS

HERE = pathlib.Path(__file__).parent


@pytest.fixture(scope="module")
def cluster():
    with switchyard.LocalCluster(workers=2, devices_per_worker=4) as c:
        yield c


NEWEST_CLIENT = HERE.parents[1] / ".venv-jax-0.12" / "bin" / "python"
OLDEST_CLIENT = HERE.parents[1] / ".venv-jax-0.10" / "bin" / "python"


def run_client(cluster, init, *checks, timeout=300, python=sys.executable):
    env = {**os.environ, "JAX_BACKEND_TARGET": cluster.target}
    if python != sys.executable:  # another venv: switchyard from the source tree
        env["PYTHONPATH"] = str(HERE.parents[1] / "python")
    if init == "pathwaysutils":
        env["IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS"] = "true"
    else:
        env.pop("IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS", None)  # initialize() sets it
    return subprocess.run([str(python), str(HERE / "proxy_client.py"), "--init", init, *checks],
                          env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("check", list(CHECKS))
def test_check_with_pathwaysutils(cluster, check):
    result = run_client(cluster, "pathwaysutils", check)
    assert result.returncode == 0 and f"PASS {check}" in result.stdout, result.stderr[-4000:]


def test_whole_suite_with_switchyard_initialize(cluster):
    result = run_client(cluster, "switchyard")
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.count("PASS ") == len(CHECKS)


# The other clients: jax/jaxlib 0.12.0.1 (protocol 16..25, SerDes 2..6) and 0.10.2 on
# Python 3.11 (SerDes 3); ./dev setup makes their venvs. They get switchyard from the
# source tree (host callbacks need switchyard.initialize()).
OTHER_CLIENTS = {"0.12": NEWEST_CLIENT, "0.10": OLDEST_CLIENT}


@pytest.mark.parametrize("init", ["pathwaysutils", "switchyard"])
@pytest.mark.parametrize("version", list(OTHER_CLIENTS))
def test_whole_suite_with_another_jax_client(cluster, version, init):
    python = OTHER_CLIENTS[version]
    assert python.exists(), f"run ./dev setup: the jax {version} client venv is missing"
    result = run_client(cluster, init, python=python)
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.count("PASS ") == len(CHECKS)


def test_session_frees_worker_buffers_when_the_client_ends(cluster):
    assert run_client(cluster, "switchyard", "sharded", "cross_slice").returncode == 0
    assert worker_buffers(cluster) == 0


def test_mlp_example_matches_local_jax_over_200_steps(cluster):
    env = {**os.environ, "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS": "true"}
    result = subprocess.run([sys.executable, str(HERE.parents[1] / "examples" / "train_mlp.py"),
                             "--target", cluster.target, "--steps", "200"],
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "OK: 200 steps through Switchyard match local JAX" in result.stdout


LARGE_PUTS = """
import pathwaysutils
pathwaysutils.initialize()
import jax, numpy as np
from jax.sharding import NamedSharding, Mesh, PartitionSpec as P
big = np.arange(1 << 20, dtype=np.float32).reshape(1024, 1024)   # 4 MiB: through a file
small = np.arange(1000, dtype=np.int32)                           # under the threshold: gRPC
x = jax.device_put(big, jax.devices()[0])
mesh = Mesh(np.array(jax.devices()), ("d",))
y = jax.device_put(np.tile(big, (8, 1)), NamedSharding(mesh, P("d")))  # 4 MiB shards
z = jax.device_put(small, jax.devices()[-1])
assert np.array_equal(np.asarray(x), big)
assert np.array_equal(np.asarray(y), np.tile(big, (8, 1)))
assert np.array_equal(np.asarray(x + 1), big + 1)
assert np.array_equal(np.asarray(z), small)
print("LARGE PUTS OK")
"""


def large_put_client(cluster, directory):
    env = {**os.environ, **cluster.env(),
           "IFRT_PROXY_GRPC_LARGE_TRANSFER_OPTIMIZATION_DIRECTORY": str(directory),
           "IFRT_PROXY_GRPC_LARGE_TRANSFER_OPTIMIZATION_THRESHOLD_BYTES": str(1 << 20)}
    return subprocess.run([sys.executable, "-c", LARGE_PUTS], env=env, capture_output=True,
                          text=True, timeout=300)


def test_large_host_buffers_come_through_the_shared_directory(tmp_path):
    """The client's large-transfer path: buffers above the threshold are files the proxy
    takes (and removes); smaller ones still stream over gRPC."""
    with switchyard.LocalCluster(workers=2, devices_per_worker=2,
                                 large_transfer_directory=str(tmp_path)) as c:
        result = large_put_client(c, tmp_path)
        assert result.returncode == 0 and "LARGE PUTS OK" in result.stdout, result.stderr[-4000:]
    assert list(tmp_path.iterdir()) == []


def test_a_proxy_without_the_shared_directory_refuses_large_transfers_clearly(cluster, tmp_path):
    result = large_put_client(cluster, tmp_path)
    assert result.returncode != 0
    assert "--large_transfer_directory" in result.stderr, result.stderr[-4000:]
    # The proxy is still up for the next client.
    assert run_client(cluster, "switchyard", "sharded").returncode == 0
