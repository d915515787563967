"""deploy/slurm/switchyard.sbatch on a real slurmctld and slurmd (Debian's slurm-wlm, several
node names on this machine): a JAX program through the cluster the job starts, and a
served cluster that `scancel` takes down without leaving a process behind."""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

from slurm_cluster import SlurmCluster, available
from switchyard.cluster import find_binary, find_plugin, free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
SBATCH = ROOT / "deploy" / "slurm" / "switchyard.sbatch"

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))

PROGRAM = """
import jax, jax.numpy as jnp, numpy as np, switchyard
switchyard.initialize()
devices = jax.devices()
assert sorted({d.slice_index for d in devices}) == [0, 1], devices
x = np.arange(32, dtype=np.float32).reshape(8, 4)
for d in devices:
    y = jax.jit(lambda a: jnp.sin(a) @ a.T)(jax.device_put(x, d))
    np.testing.assert_allclose(np.asarray(y), np.sin(x) @ x.T, rtol=1e-5)
print("SLURM JOB OK", len(devices), "devices", flush=True)
switchyard.shutdown()
"""


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes=2)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def sbatch(slurm, workdir, *args, rm_port, proxy_port, slices=2):
    env = {"SWITCHYARD_BIN": find_binary(), "SWITCHYARD_PJRT_PLUGIN": find_plugin(),
           "SWITCHYARD_WORKER_PYTHON": sys.executable,
           # Every "node" is this machine, in the cluster's network namespace.
           "SWITCHYARD_LISTEN_HOST": "127.0.0.1", "SWITCHYARD_HEAD_ADDRESS": "127.0.0.1",
           "SWITCHYARD_ADVERTISE_HOST": "127.0.0.1"}
    out = slurm.run("sbatch", "--parsable", "--nodes=2", f"--chdir={workdir}",
                    f"--output={workdir}/job.out", str(SBATCH), "--slices", str(slices),
                    "--devices-per-host", "2", "--rm-port", str(rm_port), "--proxy-port",
                    str(proxy_port), "--worker-port", "0", *args, env=env).stdout
    return out.strip().split(";")[0]


def processes_with(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


def worker_pids(rm_port: int) -> list[int]:
    """The worker processes themselves (not the bash that restarts them)."""
    pids = []
    for pid in processes_with(f"--resource_manager_address=127.0.0.1:{rm_port}"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[0] == find_binary().encode() and argv[1] == b"worker":
            pids.append(pid)
    return pids


def role_pids(role: str, port: int) -> list[int]:
    """The `switchyard rm|proxy` processes serving `port` (not their supervising bash)."""
    pids = []
    for pid in processes_with(f"--server_port={port}"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[0] == find_binary().encode() and argv[1] == role.encode():
            pids.append(pid)
    return pids


def tls_flags(certs: pathlib.Path) -> list[str]:
    """The job's own certificates (the script's per-job CA, in its directory)."""
    return [f"--tls_ca_file={certs / 'ca.pem'}", f"--tls_cert_file={certs / 'fleet.pem'}",
            f"--tls_key_file={certs / 'fleet.key'}"]


def fleet_hosts(slurm, rm_port: int, certs: pathlib.Path) -> list[dict]:
    done = subprocess.run([*slurm.prefix, find_binary(), "status", "--json",
                           f"--resource_manager_address=127.0.0.1:{rm_port}", *tls_flags(certs)],
                          capture_output=True, text=True, timeout=60)
    out = done.stdout
    if not out.strip():
        print("status --json:", done.returncode, done.stderr)
        return []
    return [host for s in json.loads(out).get("slices", []) for host in s.get("hosts", [])]


def healthy_hosts(slurm, rm_port: int, certs: pathlib.Path) -> int:
    return sum(bool(host.get("healthy")) for host in fleet_hosts(slurm, rm_port, certs))


def device_ids(slurm, rm_port: int, certs: pathlib.Path) -> list[str]:
    return sorted(str(d["global_id"]) for host in fleet_hosts(slurm, rm_port, certs)
                  for d in host.get("devices", []))


def test_the_job_refuses_nodes_that_do_not_split_into_its_slices(slurm, tmp_path):
    job = sbatch(slurm, tmp_path, rm_port=free_port(), proxy_port=free_port(), slices=3)
    assert slurm.wait_job(job, {"FAILED", "COMPLETED"}, timeout=60) == "FAILED"
    assert "2 nodes do not split into 3 slices" in (tmp_path / "job.out").read_text()


def test_a_jax_program_runs_through_a_cluster_started_by_sbatch(slurm, tmp_path):
    (tmp_path / "program.py").write_text(PROGRAM)
    rm_port = free_port()
    job = sbatch(slurm, tmp_path, "--", sys.executable, str(tmp_path / "program.py"),
                 rm_port=rm_port, proxy_port=free_port())
    state = slurm.wait_job(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=240)
    output = (tmp_path / "job.out").read_text()
    assert state == "COMPLETED", output + slurm.logs()
    assert "ready: JAX_BACKEND_TARGET=grpc://127.0.0.1:" in output
    assert "SLURM JOB OK 4 devices" in output
    assert "command exited with 0" in output
    deadline = time.monotonic() + 20
    while processes_with(f"--server_port={rm_port}") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not processes_with(f"--server_port={rm_port}")


def test_scancel_takes_a_served_cluster_down_with_no_process_left(slurm, tmp_path):
    rm_port, proxy_port = free_port(), free_port()
    job = sbatch(slurm, tmp_path, rm_port=rm_port, proxy_port=proxy_port)
    slurm.wait_job(job, {"RUNNING"}, timeout=60)
    deadline = time.monotonic() + 120
    output = ""
    while "ready: JAX_BACKEND_TARGET" not in output:
        assert time.monotonic() < deadline, output + slurm.logs()
        assert slurm.job_state(job) == "RUNNING", output + slurm.logs()
        time.sleep(0.5)
        output = (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else ""
    found = re.search(r"JAX_BACKEND_TARGET=(\S+)", output)
    assert found, output + slurm.logs()
    target = found.group(1)
    assert target == f"grpc://127.0.0.1:{proxy_port}"
    # A client from outside the job, as a notebook on a login node would connect.
    client = subprocess.run(
        [*slurm.prefix, sys.executable, "-c", PROGRAM],
        env={**os.environ, "JAX_PLATFORMS": "proxy", "JAX_BACKEND_TARGET": target},
        capture_output=True, text=True, timeout=120)
    assert "SLURM JOB OK 4 devices" in client.stdout, client.stdout + client.stderr
    # The fleet runs mutual TLS with a CA of this job's own, whose key is gone: without
    # the job's certificate, `status` (or a fake worker) gets nowhere.
    certs = tmp_path / f"switchyard-{job}" / "tls"
    assert (certs.stat().st_mode & 0o777) == 0o700
    assert sorted(p.name for p in certs.iterdir()) == ["ca.pem", "fleet.key", "fleet.pem"]
    plain = subprocess.run([*slurm.prefix, find_binary(), "status",
                            f"--resource_manager_address=127.0.0.1:{rm_port}"],
                           capture_output=True, text=True, timeout=60)
    assert plain.returncode != 0, plain.stdout
    hosts = fleet_hosts(slurm, rm_port, certs)
    assert sum(bool(host.get("healthy")) for host in hosts) == 2, (hosts, slurm.logs())
    ours = processes_with(f"127.0.0.1:{rm_port}") + processes_with(f"--server_port={rm_port}")
    assert len(ours) >= 3, ours  # rm, proxy, and the workers (with their srun wrappers)

    # A worker killed outright is started again by its step: the fleet grows back.
    victim = worker_pids(rm_port)[0]
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        workers = worker_pids(rm_port)
        if (len(workers) == 2 and victim not in workers
                and healthy_hosts(slurm, rm_port, certs) == 2):
            break
        assert time.monotonic() < deadline, (workers, slurm.logs())
        time.sleep(0.5)
    workers_log = tmp_path / f"switchyard-{job}" / "workers.log"
    while "starting it again" not in workers_log.read_text():
        assert time.monotonic() < deadline, workers_log.read_text()
        time.sleep(0.5)

    # So are the rm (its state file keeps the device ids) and the proxy: the job goes on
    # serving, and a new client runs on the same devices.
    ids_before = device_ids(slurm, rm_port, certs)
    assert len(set(ids_before)) == 4, ids_before
    for role, port in (("rm", rm_port), ("proxy", proxy_port)):
        victim = role_pids(role, port)[0]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 60
        log = tmp_path / f"switchyard-{job}" / f"{role}.log"
        # srun forwards the step's output asynchronously: the log line may trail the process.
        while not (role_pids(role, port) and victim not in role_pids(role, port)
                   and "starting it again" in log.read_text()):
            assert time.monotonic() < deadline, log.read_text() + slurm.logs()
            time.sleep(0.5)
    deadline = time.monotonic() + 60
    while healthy_hosts(slurm, rm_port, certs) != 2:
        assert time.monotonic() < deadline, slurm.logs()
        time.sleep(0.5)
    assert device_ids(slurm, rm_port, certs) == ids_before
    assert slurm.job_state(job) == "RUNNING"
    deadline = time.monotonic() + 60
    while True:  # the restarted proxy may still be starting
        client = subprocess.run(
            [*slurm.prefix, sys.executable, "-c", PROGRAM],
            env={**os.environ, "JAX_PLATFORMS": "proxy", "JAX_BACKEND_TARGET": target},
            capture_output=True, text=True, timeout=120)
        if "SLURM JOB OK 4 devices" in client.stdout or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert "SLURM JOB OK 4 devices" in client.stdout, client.stdout + client.stderr
    slurm.run("scancel", job)
    slurm.wait_job(job, {"CANCELLED", "GONE"}, timeout=60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (processes_with(f"127.0.0.1:{rm_port}") or
                                           processes_with(f"--server_port={rm_port}")):
        time.sleep(0.2)
    left = processes_with(f"127.0.0.1:{rm_port}") + processes_with(f"--server_port={rm_port}")
    assert not left, [open(f"/proc/{p}/cmdline").read() for p in left
                      if os.path.exists(f"/proc/{p}")]
