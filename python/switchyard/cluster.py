"""Start and stop a local Switchyard cluster (`switchyard up`) from Python."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time

_REPO = pathlib.Path(__file__).resolve().parents[2]


def find_binary() -> str:
    """The `switchyard` binary: $SWITCHYARD_BIN, else the repository's build (when this
    package runs from a checkout), else `switchyard` on PATH (`cmake --install`)."""
    path = os.environ.get("SWITCHYARD_BIN")
    if not path:
        build = _REPO / "build" / "src" / "cli" / "switchyard"
        path = str(build) if os.access(build, os.X_OK) else shutil.which("switchyard")
    if not path or not os.access(path, os.X_OK):
        raise FileNotFoundError(
            f"no switchyard binary ({path or 'none on PATH'}): set SWITCHYARD_BIN, put it on "
            "PATH (cmake --install), or run ./dev build in a checkout")
    return path


def find_plugin() -> str:
    """The PJRT plugin: $SWITCHYARD_PJRT_PLUGIN, else the pinned CPU plugin wheel."""
    path = os.environ.get("SWITCHYARD_PJRT_PLUGIN")
    if path:
        return path
    import lammps_jax_pjrt_cpu

    return str(lammps_jax_pjrt_cpu.PLUGIN_PATH)


def find_python() -> str:
    """A Python with jaxlib for the workers' kernels: $SWITCHYARD_WORKER_PYTHON, else this one."""
    return os.environ.get("SWITCHYARD_WORKER_PYTHON", sys.executable)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_child(parent: int, role: str, slice_index: int | None = None) -> int:
    """The pid of a running `switchyard <role>` child of `parent` (a `switchyard up`),
    read from /proc; a worker by its slice. LookupError if there is none (it may be
    between a crash and its restart)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) != parent:
                    continue
            with open(f"/proc/{entry}/cmdline") as f:
                argv = f.read().split("\0")
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        if len(argv) > 1 and argv[1] == role and (
                slice_index is None or f"--slice_index={slice_index}" in argv):
            return int(entry)
    where = "" if slice_index is None else f" of slice {slice_index}"
    raise LookupError(f"no running {role}{where}")


class LocalCluster:
    """`with LocalCluster(workers=2, devices_per_worker=4) as c:` a running fleet.

    Every process serves on a Unix socket in a directory only this user can enter (no
    other user of the host gets in), unless `rm_port` / `proxy_port` put the RM or the
    proxy on TCP (0: a free port). `c.target` is what JAX connects to
    (`JAX_BACKEND_TARGET`), `c.env()` the environment a client process needs,
    `c.rm_address` the resource manager, and `c.status()` the fleet as
    `switchyard status --json` prints it. `gcs_scratch_location` gives the workers a
    persistent compilation cache there. `virtual_slices` ("cpu:1") makes it a shared
    pool: each session leases slices of that shape (docs/shared-pool.md).
    `metrics=True` has every process serve /metrics on a loopback port it chooses;
    `c.metrics` maps "proxy", "rm", "worker-0", ... to their URLs.
    `large_transfer_directory` lets the clients of `env()` leave large host buffers there
    for the proxy (docs/performance.md). `flags` go to `switchyard up` as they are (e.g.
    `--tokens_file=...`, `--tenant_shares=...`).
    """

    def __init__(self, workers: int = 2, devices_per_worker: int = 4, hosts_per_slice: int = 1,
                 rm_port: int | None = None, proxy_port: int | None = None,
                 startup_timeout_s: float = 120.0, gcs_scratch_location: str | None = None,
                 virtual_slices: str | None = None, large_transfer_directory: str | None = None,
                 metrics: bool = False, flags: tuple[str, ...] = ()):
        self.workers = workers
        self.devices_per_worker = devices_per_worker
        self.hosts_per_slice = hosts_per_slice
        self.rm_port = free_port() if rm_port == 0 else rm_port
        self.proxy_port = free_port() if proxy_port == 0 else proxy_port
        self.rm_address = ""  # known once started: `up` makes the sockets' directory
        self.target = ""
        self._timeout = startup_timeout_s
        self.gcs_scratch_location = gcs_scratch_location
        self.virtual_slices = virtual_slices
        self.large_transfer_directory = large_transfer_directory
        self.flags = tuple(flags) + (("--metrics_port=0",) if metrics else ())
        self.metrics: dict[str, str] = {}
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        cmd = [find_binary(), "up", f"--workers={self.workers}",
               f"--devices_per_worker={self.devices_per_worker}",
               f"--hosts_per_slice={self.hosts_per_slice}", f"--pjrt_plugin={find_plugin()}",
               f"--python={find_python()}",
               f"--startup_timeout_s={int(self._timeout)}"]
        if self.rm_port:
            cmd.append(f"--rm_port={self.rm_port}")
        if self.proxy_port:
            cmd.append(f"--proxy_port={self.proxy_port}")
        if self.gcs_scratch_location:
            cmd.append(f"--gcs_scratch_location={self.gcs_scratch_location}")
        if self.virtual_slices:
            cmd.append(f"--virtual_slices={self.virtual_slices}")
        if self.large_transfer_directory:
            cmd.append(f"--large_transfer_directory={self.large_transfer_directory}")
        cmd.extend(self.flags)
        self._process = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        out = self._process.stdout
        assert out is not None  # stdout=PIPE
        deadline = time.monotonic() + self._timeout
        line = out.readline()  # blocks until ready, or EOF if up failed
        if "local cluster ready" not in line or time.monotonic() > deadline:
            self.stop()
            raise RuntimeError(f"switchyard up did not start (said {line!r})")
        # "... ready: resource manager ADDRESS, ...", then "  JAX_PLATFORMS=proxy
        # JAX_BACKEND_TARGET=TARGET ..."
        self.rm_address = line.split("resource manager ", 1)[1].split(",", 1)[0]
        usage = out.readline()
        self.target = usage.split("JAX_BACKEND_TARGET=", 1)[1].split()[0]
        if "--metrics_port=0" in self.flags:
            out.readline()  # "switchyard status ..."
            # "  metrics: proxy=URL rm=URL worker-0=URL ..."
            urls = out.readline().split("metrics:", 1)[1].split()
            self.metrics = dict(url.split("=", 1) for url in urls)

    @property
    def pid(self) -> int:
        """The `switchyard up` process; the rm, workers and proxy are its children."""
        if self._process is None:
            raise RuntimeError("the cluster is not started")
        return self._process.pid

    def child_pid(self, role: str, slice_index: int | None = None) -> int:
        """The pid of the running `role` ("rm", "proxy", "worker"; a worker by slice)."""
        return find_child(self.pid, role, slice_index)

    def env(self) -> dict:
        """Environment variables for a JAX client process of this cluster."""
        env = {"JAX_PLATFORMS": "proxy", "JAX_BACKEND_TARGET": self.target,
               "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS": "true"}
        if self.large_transfer_directory:
            # Used for host buffers from IFRT_PROXY_GRPC_LARGE_TRANSFER_OPTIMIZATION_
            # THRESHOLD_BYTES up, which the client sets (unset: never).
            env["IFRT_PROXY_GRPC_LARGE_TRANSFER_OPTIMIZATION_DIRECTORY"] = \
                self.large_transfer_directory
        return env

    def status(self) -> dict:
        out = subprocess.run([find_binary(), "status", "--json",
                              f"--resource_manager_address={self.rm_address}"],
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out)

    def worker_addresses(self) -> list[str]:
        return [host["address"] for s in self.status()["slices"] for host in s["hosts"]]

    def stop(self) -> None:
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None
