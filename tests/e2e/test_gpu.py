"""The real GPU path: workers on NVIDIA GPUs with the CUDA PJRT plugin, a stock JAX client
through the proxy. Skipped without a GPU (CI has none). On a GPU machine:

    SWITCHYARD_CUDA_PLUGIN=/path/to/xla_cuda_plugin.so .venv/bin/python -m pytest tests/e2e/test_gpu.py

(the plugin is found by itself when `jax_plugins.xla_cuda13` is importable by this or the
system Python). The two-host test needs two GPUs: each worker sees one
(CUDA_VISIBLE_DEVICES) and they form one NCCL clique through the resource manager.
"""

import glob
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

from switchyard.cluster import free_port


def cuda_plugin() -> str | None:
    if os.environ.get("SWITCHYARD_CUDA_PLUGIN"):
        return os.environ["SWITCHYARD_CUDA_PLUGIN"]
    spec = importlib.util.find_spec("jax_plugins.xla_cuda13")
    dirs = list(spec.submodule_search_locations) if spec else []
    python3 = shutil.which("python3")
    if not dirs and python3:
        found = subprocess.run(
            [python3, "-c", "import jax_plugins.xla_cuda13 as p; print(p.__path__[0])"],
            capture_output=True, text=True)
        dirs = found.stdout.split()
    for d in dirs:
        for path in glob.glob(os.path.join(d, "*.so")):
            return path
    return None


def gpu_count() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


PLUGIN = cuda_plugin() if gpu_count() else None
pytestmark = pytest.mark.skipif(PLUGIN is None, reason="needs an NVIDIA GPU and the CUDA plugin")

CLIENT = """
import numpy as np, jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
devices = jax.devices()
assert devices[0].platform == "cuda", devices
rng = np.random.default_rng(0)
a, b = rng.standard_normal((256, 256), np.float32), rng.standard_normal((256, 256), np.float32)
got = np.asarray(jax.jit(lambda x, y: jnp.tanh(x @ y).sum(axis=0))(a, b))
np.testing.assert_allclose(got, np.tanh(a.astype(np.float64) @ b).sum(axis=0), rtol=2e-2, atol=2e-2)
n = len(devices)
mesh = Mesh(np.array(devices), ("x",))
x = jax.device_put(np.arange(8 * n, dtype=np.float32), NamedSharding(mesh, P("x")))
total = jax.jit(jax.shard_map(lambda v: jax.lax.psum(v.sum(), "x"), mesh=mesh,
                              in_specs=P("x"), out_specs=P()))(x)
assert float(total) == float(np.arange(8 * n).sum()), total
print("GPU OK", n, "devices")
"""


def start(spawn, workers: int):
    rm_port, proxy_port = free_port(), free_port()
    rm = spawn("rm", f"--server_port={rm_port}")
    rm.wait_for("resource manager listening")
    started = []
    for host in range(workers):
        extra = [f"--num_nodes={workers}"] if workers > 1 else []
        started.append(spawn("worker", f"--resource_manager_address=127.0.0.1:{rm_port}",
                       "--server_port=0", "--slice_index=0", f"--host_index={host}",
                       f"--pjrt_plugin={PLUGIN}", *extra,
                       env={"CUDA_VISIBLE_DEVICES": str(host)} if workers > 1 else None))
    # A multi-host client forms only once every host is up, so wait after starting all.
    for worker in started:
        worker.wait_for("registered with the resource manager", timeout=180)
    proxy = spawn("proxy", f"--server_port={proxy_port}",
                  f"--resource_manager_address=127.0.0.1:{rm_port}")
    proxy.wait_for("proxy listening")
    return f"grpc://127.0.0.1:{proxy_port}"


def run_client(target: str) -> str:
    env = {**os.environ, "JAX_PLATFORMS": "proxy", "JAX_BACKEND_TARGET": target,
           "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS": "true"}
    done = subprocess.run([sys.executable, "-c", CLIENT], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_one_gpu_worker_runs_jax_programs(spawn):
    target = start(spawn, 1)
    assert "GPU OK 1 devices" in run_client(target)


@pytest.mark.skipif(gpu_count() < 2, reason="a two-host NCCL clique needs two GPUs")
def test_two_hosts_form_one_clique_through_the_resource_manager(spawn):
    target = start(spawn, 2)
    assert "GPU OK 2 devices" in run_client(target)
