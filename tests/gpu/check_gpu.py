"""Switchyard on real GPUs: rm + worker(s) with the CUDA PJRT plugin + proxy, and a stock
JAX client through the proxy. Standard library and jax only, so that it runs on a GPU
machine's own Python (jax + jax-cuda13-pjrt) next to a `./dev gpu-bundle` build:

    python3 build/gpu-bundle/check_gpu.py          # or tests/gpu/check_gpu.py in a checkout

Checks: one GPU worker runs jitted programs and a psum; with two or more GPUs, two
workers of one slice (one GPU each, `--num_nodes=2`) form one NCCL clique through the
resource manager's key-value store and run a psum across both hosts. Prints one line
per check and exits non-zero if any fails; exits 0 with "SKIP" when there is no GPU.
"""

import glob
import importlib.util
import os
import pathlib
import queue
import shutil
import socket
import subprocess
import sys
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent

# What switchyard.initialize() does, inline: a GPU machine's Python may lack grpcio, which
# the switchyard package needs.
CLIENT = """
import os
import numpy as np, jax, jax.numpy as jnp
from jax.extend import backend
from jax.extend.backend import ifrt_proxy
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
backend.register_backend_factory("proxy", lambda: ifrt_proxy.get_client(
    os.environ["JAX_BACKEND_TARGET"], ifrt_proxy.ClientConnectionOptions()), priority=-1)
jax.config.update("jax_enable_compilation_cache", False)
devices = jax.devices()
assert devices[0].platform in ("cuda", "gpu"), devices
rng = np.random.default_rng(0)
a, b = rng.standard_normal((256, 256), np.float32), rng.standard_normal((256, 256), np.float32)
got = np.asarray(jax.jit(lambda x, y: jnp.tanh(x @ y).sum(axis=0))(a, b))
want = np.tanh(a.astype(np.float64) @ b).sum(axis=0)
np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)
n = len(devices)
mesh = Mesh(np.array(devices), ("x",))
x = jax.device_put(np.arange(8 * n, dtype=np.float32), NamedSharding(mesh, P("x")))
total = jax.jit(jax.shard_map(lambda v: jax.lax.psum(v.sum(), "x"), mesh=mesh,
                              in_specs=P("x"), out_specs=P()))(x)
assert float(total) == float(np.arange(8 * n).sum()), total
print("GPU OK", n, "devices", flush=True)
"""


def find_binary():
    for path in (os.environ.get("SWITCHYARD_BIN"), HERE / "switchyard",
                 HERE.parents[1] / "build" / "src" / "cli" / "switchyard"):
        if path and os.access(path, os.X_OK):
            return str(path)
    sys.exit("no switchyard binary: run ./dev build or ./dev gpu-bundle")


def find_cuda_plugin():
    if os.environ.get("SWITCHYARD_CUDA_PLUGIN"):
        return os.environ["SWITCHYARD_CUDA_PLUGIN"]
    try:
        spec = importlib.util.find_spec("jax_plugins.xla_cuda13")
    except ModuleNotFoundError:
        spec = None
    for d in ((spec.submodule_search_locations or []) if spec else []):
        for path in glob.glob(os.path.join(d, "*.so")):
            return path
    return None


def gpu_count():
    if shutil.which("nvidia-smi") is None:
        return 0
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Process:
    """A switchyard process whose output is echoed, prefixed, and searchable."""

    def __init__(self, name, args, env=None):
        self.name = name
        self.lines: queue.Queue[str] = queue.Queue()
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env={**os.environ, **(env or {})})
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            print(f"  [{self.name}] {line}", end="", flush=True)
            self.lines.put(line)

    def wait_for(self, text, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if text in self.lines.get(timeout=0.5):
                    return
            except queue.Empty as e:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited ({self.proc.returncode}) "
                                       f"before {text!r}") from e
        raise RuntimeError(f"{self.name}: no {text!r} within {timeout} s")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def run_check(binary, plugin, hosts):
    env = {}
    lib = pathlib.Path(binary).parent / "lib"
    if lib.is_dir():  # a gpu-bundle carries its shared libraries
        env["LD_LIBRARY_PATH"] = f"{lib}:{os.environ.get('LD_LIBRARY_PATH', '')}"
    rm_port, proxy_port = free_port(), free_port()
    started = []
    try:
        rm = Process("rm", [binary, "rm", f"--server_port={rm_port}"], env)
        started.append(rm)
        rm.wait_for("resource manager listening", 30)
        workers = []
        for host in range(hosts):
            extra = [f"--num_nodes={hosts}"] if hosts > 1 else []
            worker_env = {**env, "CUDA_VISIBLE_DEVICES": str(host)} if hosts > 1 else env
            workers.append(Process(f"worker {host}", [
                binary, "worker", f"--resource_manager_address=127.0.0.1:{rm_port}",
                "--server_port=0", "--slice_index=0", f"--host_index={host}",
                f"--pjrt_plugin={plugin}", *extra], worker_env))
        started += workers
        for worker in workers:  # a multi-host client forms once every host is up
            worker.wait_for("registered with the resource manager", 300)
        proxy = Process("proxy", [binary, "proxy", f"--server_port={proxy_port}",
                                  f"--resource_manager_address=127.0.0.1:{rm_port}"], env)
        started.append(proxy)
        proxy.wait_for("proxy listening", 30)
        client_env = {**os.environ, "JAX_PLATFORMS": "proxy",
                      "JAX_BACKEND_TARGET": f"grpc://127.0.0.1:{proxy_port}",
                      "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS": "true"}
        done = subprocess.run([sys.executable, "-c", CLIENT], env=client_env,
                              capture_output=True, text=True, timeout=600)
        # One worker sees every GPU; two hosts see one each.
        expected = "GPU OK" if hosts == 1 else f"GPU OK {hosts} devices"
        if done.returncode != 0 or expected not in done.stdout:
            return False, (done.stdout + done.stderr)[-3000:]
        return True, done.stdout.strip()
    except Exception as e:  # report and go on with the next check
        return False, str(e)
    finally:
        for process in reversed(started):
            process.stop()


def main():
    gpus = gpu_count()
    plugin = find_cuda_plugin() if gpus else None
    if gpus == 0 or plugin is None:
        print(f"SKIP: {gpus} GPUs, CUDA plugin {plugin}")
        return 0
    binary = find_binary()
    print(f"{gpus} GPUs, plugin {plugin}, binary {binary}", flush=True)
    checks = [("one GPU worker", 1)] + ([("two hosts, one NCCL clique", 2)] if gpus >= 2 else [])
    failed = 0
    for name, hosts in checks:
        t = time.monotonic()
        ok, detail = run_check(binary, plugin, hosts)
        print(f"{'PASS' if ok else 'FAIL'} {name} ({time.monotonic() - t:.0f} s): {detail}",
              flush=True)
        failed += not ok
    if gpus < 2:
        print("SKIP two hosts, one NCCL clique: needs two GPUs")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
