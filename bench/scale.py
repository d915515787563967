"""The scale section of the benchmarks (`./dev bench --only scale`): the control plane with a
fleet of simulated hosts (`switchyard up --workers 1 --simulated_hosts N`), as curves over N.
Each simulated host is the real worker over a plugin with no device (docs/scale.md), so what
is measured is Switchyard's own cost: the RM, the proxy, the workers' control paths, and one
client driving every host."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any

import switchyard
from procs import children, cpu_seconds_of
from switchyard.cluster import find_child

HERE = pathlib.Path(__file__).resolve().parent
PER_PROCESS = 25  # simulated hosts per process
IDLE_S = 5.0


def _stat(pid: str) -> tuple[int, int, float]:
    """(RSS KiB, threads, CPU seconds) of a process."""
    status = pathlib.Path(f"/proc/{pid}/status").read_text()
    rss = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))
    threads = int(next(line.split()[1] for line in status.splitlines()
                       if line.startswith("Threads")))
    return rss, threads, cpu_seconds_of(f"/proc/{pid}/stat")


def _sample(up_pid: int) -> dict[str, list[float]]:
    """[RSS KiB, threads, CPU s, processes] of the cluster's processes by role: rm, proxy,
    worker (the real one), sim (every process of simulated hosts together)."""
    roles: dict[str, list[float]] = {}
    for pid, role in children(up_pid):
        try:
            rss, threads, cpu = _stat(pid)
        except (OSError, StopIteration):
            continue
        row = roles.setdefault(role, [0, 0, 0.0, 0])
        row[0] += rss
        row[1] += threads
        row[2] += cpu
        row[3] += 1
    return roles


def scale_point(hosts: int, steps: int) -> dict[str, Any]:
    started = time.monotonic()
    with switchyard.LocalCluster(
            workers=1, devices_per_worker=1, startup_timeout_s=900,
            flags=(f"--simulated_hosts={hosts}",
                   f"--simulated_hosts_per_process={PER_PROCESS}")) as c:
        r: dict[str, Any] = {"startup_s": time.monotonic() - started}
        before = _sample(c.pid)
        time.sleep(IDLE_S)
        idle = _sample(c.pid)
        r["idle_cpu"] = {role: (idle[role][2] - before[role][2]) / IDLE_S for role in idle}
        r["idle"] = idle
        client = subprocess.Popen(
            [sys.executable, str(HERE / "scale_cases.py"), "--steps", str(steps),
             "--kill_pid", str(find_child(c.pid, "worker", 1)), "--kill_slice", "1"],
            env={**os.environ, **c.env()}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True)
        assert client.stdin is not None and client.stdout is not None
        sims = [int(pid) for pid, role in children(c.pid) if role == "sim"]
        try:
            for line in client.stdout:
                said = line.strip()
                if said == "STOP_SIMS":  # they stand for other machines: off these cores
                    for pid in sims:
                        os.kill(pid, signal.SIGSTOP)
                elif said == "CONT_SIMS":
                    for pid in sims:
                        os.kill(pid, signal.SIGCONT)
                elif said == "PAUSE":
                    r["session"] = _sample(c.pid)
                else:
                    continue
                client.stdin.write("go\n")
                client.stdin.flush()
                if said == "PAUSE":
                    break
        finally:
            for pid in sims:
                os.kill(pid, signal.SIGCONT)
        out, _ = client.communicate(timeout=600)
        if client.returncode != 0 or "RESULT " not in out:
            raise RuntimeError(f"the scale client failed ({client.returncode}): {out[-2000:]}")
        r["client"] = json.loads(out.split("RESULT ", 1)[1])
    return r


def scale(hosts_list: list[int], steps: int = 5) -> dict[str, Any]:
    return {str(n): scale_point(n, steps) for n in hosts_list}


def render_scale(r: dict[str, Any]) -> str:
    m = r["scale"]
    ns = list(m)
    lines = [
        f"One real worker and N simulated hosts (one device each, {PER_PROCESS} hosts a "
        "process, launches of 1 ms), one client. A program on every host: the client "
        "calls one compiled program per device (CPU programs do not span slices).\n",
        "| | " + " | ".join(f"N = {n}" for n in ns) + " |",
        "|---|" + "---|" * len(ns)]

    def row(label: str, pick, digits: int = 1) -> None:
        cells = []
        for n in ns:
            try:
                cells.append(f"{pick(m[n], int(n)):.{digits}f}")
            except (KeyError, ZeroDivisionError):
                cells.append("-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    row("`up` until ready, s", lambda p, n: p["startup_s"])
    row("session start (`jax.devices()`), s", lambda p, n: p["client"]["session_s"], 2)
    row("compile for every host, s", lambda p, n: p["client"]["compile_s"], 2)
    row("  per host, ms", lambda p, n: p["client"]["compile_s"] / (n + 1) * 1e3, 2)
    row("issue one program on every host, ms", lambda p, n: p["client"]["issue_s"] * 1e3)
    row("  and complete it, ms", lambda p, n: p["client"]["complete_s"] * 1e3)
    row("  issue, the simulated hosts stopped meanwhile, ms",
        lambda p, n: p["client"]["issue_alone_s"] * 1e3)
    row("launches/s, pipelined", lambda p, n: p["client"]["launches_per_s"], 0)
    row("kill -9 of a host to DATA_LOSS at the client, s",
        lambda p, n: p["client"]["data_loss_s"], 2)
    row("RM RSS, MiB", lambda p, n: p["session"]["rm"][0] / 1024)
    row("  per host, KiB", lambda p, n: p["session"]["rm"][0] / (n + 1), 0)
    row("RM CPU idle (heartbeats, watches), % of a core", lambda p, n: p["idle_cpu"]["rm"] * 100)
    row("proxy threads, with the session", lambda p, n: p["session"]["proxy"][1], 0)
    row("proxy RSS with the session, MiB", lambda p, n: p["session"]["proxy"][0] / 1024)
    row("  per host, KiB", lambda p, n: p["session"]["proxy"][0] / (n + 1), 0)
    row("proxy CPU idle, % of a core", lambda p, n: p["idle_cpu"]["proxy"] * 100)
    row("simulated host RSS, KiB each", lambda p, n: p["session"]["sim"][0] / n, 0)
    row("simulated host threads, each", lambda p, n: p["session"]["sim"][1] / n)
    row("simulated hosts' CPU idle, % of a core in all", lambda p, n: p["idle_cpu"]["sim"] * 100)
    return "\n".join(lines) + "\n"


def plot_scale(r: dict[str, Any], out: pathlib.Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    m = r["scale"]
    ns = [int(n) for n in m]
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for label, pick in (("RM RSS / host (KiB)", lambda p, n: p["session"]["rm"][0] / (n + 1)),
                        ("proxy RSS / host (KiB)",
                         lambda p, n: p["session"]["proxy"][0] / (n + 1)),
                        ("proxy threads", lambda p, n: p["session"]["proxy"][1])):
        ax[0].plot(ns, [pick(m[str(n)], n) for n in ns], marker="o", label=label)
    ax[0].set_xscale("log")
    ax[0].set_yscale("log")
    ax[0].set_xlabel("simulated hosts")
    ax[0].legend()
    for label, key in (("issue on every host (ms)", "issue_s"), ("complete (ms)", "complete_s"),
                       ("compile for every host (ms)", "compile_s")):
        ax[1].plot(ns, [m[str(n)]["client"][key] * 1e3 for n in ns], marker="o", label=label)
    ax[1].set_xscale("log")
    ax[1].set_yscale("log")
    ax[1].set_xlabel("simulated hosts")
    ax[1].legend()
    fig.tight_layout()
    fig.savefig(out / "scale.png", dpi=80)
