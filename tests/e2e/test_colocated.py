"""Colocated Python (jax.experimental.colocated_python) with stock clients against a
real local cluster (rm + 2 workers x 2 CPU devices + proxy): the functions run in each
worker's sidecar (python -m switchyard.sidecar), never silently in the client."""

import os
import pathlib
import subprocess
import sys

import pytest

import switchyard

HERE = pathlib.Path(__file__).parent


@pytest.fixture(scope="module")
def cluster():
    with switchyard.LocalCluster(workers=2, devices_per_worker=2) as c:
        yield c


def run(cluster, script, *args, timeout=600):
    env = {**os.environ, "JAX_BACKEND_TARGET": cluster.target,
           "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS": "true"}
    return subprocess.run([sys.executable, str(HERE / script), *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("init", ["pathwaysutils", "switchyard"])
def test_colocated_python(cluster, init, tmp_path):
    from colocated_client import CHECKS
    result = run(cluster, "colocated_client.py", "--init", init, str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    for check in CHECKS:
        assert f"PASS {check}" in result.stdout, result.stdout + result.stderr[-4000:]


def test_a_cluster_without_python_says_so(tmp_path, monkeypatch):
    """A worker started without --python refuses colocated calls clearly."""
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
    monkeypatch.setenv("SWITCHYARD_WORKER_PYTHON", "")
    with switchyard.LocalCluster(workers=1, devices_per_worker=1) as c:
        result = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=300,
            env={**os.environ, "JAX_BACKEND_TARGET": c.target,
                 "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS": "true"})
    assert "ERROR" in result.stdout and "--python" in result.stdout, result.stdout + result.stderr[-3000:]


def test_the_data_loading_example(cluster):
    """examples/colocated_data.py: each host's sidecar makes its slice's batches."""
    example = HERE.parent.parent / "examples" / "colocated_data.py"
    result = subprocess.run([sys.executable, str(example), "--target", cluster.target,
                             "--steps", "5"], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS": "true"})
    assert result.returncode == 0 and "OK: 2 hosts" in result.stdout, (
        result.stdout + result.stderr[-4000:])
