"""A real Slurm cluster on this machine for tests: one slurmctld and several slurmd, each
under its own node name (`slurmd -N`) and port, with Debian's slurm-wlm. Auth is
`auth/none` (no munge daemon), and slurmctld listens on every address: so the whole
cluster, and everything the tests run against it, lives in a network namespace of its own,
unconnected to any other. Nothing outside can reach it."""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import time
from typing import cast

from switchyard.cluster import free_port


def available() -> str | None:
    """None when a cluster can start here, else why not."""
    for tool in ("slurmctld", "slurmd", "sbatch", "scontrol", "ip", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian: slurmctld slurmd slurm-client)"
    if os.geteuid() != 0:
        return "slurmd must run as root to launch job steps"
    return None


class SlurmCluster:
    def __init__(self, directory: pathlib.Path, nodes: int):
        self.dir = directory
        self.nodes = [f"sy{i}" for i in range(nodes)]
        self.conf = directory / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self._daemons: list[subprocess.Popen] = []
        self.netns = f"sy-slurm-{os.getpid()}"
        # Every command of the cluster's runs inside the namespace: `prefix + argv`. Not
        # `ip netns exec`, which mounts a sysfs of its own and hides the cgroup tree slurmd
        # reads.
        self.prefix = ["nsenter", f"--net=/run/netns/{self.netns}"]

    def _write_conf(self) -> None:
        cpus = os.cpu_count() or 1
        ctld_port = free_port()
        lines = [
            f"ClusterName=sy{os.getpid()}",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/none",
            "CredType=cred/none",
            "MpiDefault=none",
            # No cgroup here: the steps' processes are tracked by their parentage.
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "SelectType=select/linear",
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "KillWait=5",
            "InactiveLimit=0",
            "SchedulerParameters=defer",
            f"StateSaveLocation={self.dir}/ctld",
            f"SlurmctldPidFile={self.dir}/slurmctld.pid",
            f"SlurmctldLogFile={self.dir}/slurmctld.log",
            f"SlurmdSpoolDir={self.dir}/spool-%n",
            f"SlurmdPidFile={self.dir}/slurmd-%n.pid",
            f"SlurmdLogFile={self.dir}/slurmd-%n.log",
        ]
        for node in self.nodes:
            lines.append(f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 "
                         f"Port={free_port()} CPUs={cpus} State=UNKNOWN")
        lines.append(f"PartitionName=sy Nodes={','.join(self.nodes)} Default=YES "
                     "MaxTime=INFINITE State=UP")
        (self.dir / "ctld").mkdir(exist_ok=True)
        for node in self.nodes:
            (self.dir / f"spool-{node}").mkdir(exist_ok=True)
        self.conf.write_text("\n".join(lines) + "\n")

    def start(self, timeout: float = 60) -> None:
        subprocess.run(["ip", "netns", "add", self.netns], check=True)
        subprocess.run([*self.prefix, "ip", "link", "set", "lo", "up"], check=True)
        # Slurm resolves names with AI_ADDRCONFIG, which finds nothing where loopback is the
        # only interface: one end of a veth pair, with a documentation address, is the
        # namespace's second interface. The other end stays down, with no address.
        inner, outer = f"sy{os.getpid() % 10**8}i", f"sy{os.getpid() % 10**8}o"
        subprocess.run(["ip", "link", "add", outer, "type", "veth", "peer", "name", inner],
                       check=True)
        subprocess.run(["ip", "link", "set", inner, "netns", self.netns], check=True)
        subprocess.run([*self.prefix, "ip", "addr", "add", "192.0.2.1/24", "dev", inner],
                       check=True)
        subprocess.run([*self.prefix, "ip", "link", "set", inner, "up"], check=True)
        self._write_conf()
        self._daemons.append(subprocess.Popen(
            [*self.prefix, "slurmctld", "-D", "-i", "-f", str(self.conf)], env=self.env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        for node in self.nodes:
            self._daemons.append(subprocess.Popen(
                [*self.prefix, "slurmd", "-D", "-N", node, "-f", str(self.conf)], env=self.env,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        deadline = time.monotonic() + timeout
        while True:
            out = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False).stdout
            if sum("idle" in line for line in out.splitlines()) == len(self.nodes):
                return
            for daemon in self._daemons:
                if daemon.poll() is not None:
                    name = cast(list[str], daemon.args)[len(self.prefix)]
                    raise RuntimeError(f"{name} exited ({daemon.returncode}):\n" + self.logs())
            if time.monotonic() > deadline:
                raise RuntimeError(f"nodes not idle within {timeout}s: {out!r}\n" + self.logs())
            time.sleep(0.5)

    def run(self, *args: str, check: bool = True, timeout: float = 60,
            env: dict | None = None, cwd: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([*self.prefix, *args], env={**self.env, **(env or {})}, cwd=cwd,
                              capture_output=True, text=True, check=check, timeout=timeout)

    def job_state(self, job_id: str) -> str:
        out = self.run("scontrol", "show", "job", job_id, "-o", check=False).stdout
        for field in out.split():
            if field.startswith("JobState="):
                return field.split("=", 1)[1]
        return "GONE"

    def wait_job(self, job_id: str, states: set[str], timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            state = self.job_state(job_id)
            if state in states:
                return state
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} is {state}, not {states}, after "
                                     f"{timeout}s\n" + self.logs())
            time.sleep(0.5)

    def logs(self) -> str:
        parts = []
        for log in sorted(self.dir.glob("*.log")):
            parts.append(f"--- {log.name}\n" + "\n".join(log.read_text().splitlines()[-15:]))
        return "\n".join(parts)

    def stop(self) -> None:
        for daemon in self._daemons:
            if daemon.poll() is None:
                os.killpg(daemon.pid, signal.SIGTERM)
        for daemon in self._daemons:
            try:
                daemon.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()
        # Deleting the namespace deletes the veth pair too.
        subprocess.run(["ip", "netns", "delete", self.netns], check=False)
