"""Fixtures for end-to-end tests: real `switchyard` processes on loopback."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from typing import IO

import pytest

import switchyard


def rss(pid: int) -> int:
    """The process's resident bytes now (VmRSS)."""
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss(pid: int) -> None:
    """The peak (`peak_rss`) starts again from now."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def peak_rss(pid: int) -> int:
    """The process's peak resident bytes (VmHWM) since it started or `reset_peak_rss`."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def wait_until(predicate, timeout: float = 30, what: str = "the condition",
               interval: float = 0.1):
    """Polls `predicate` until it returns something true, and returns that; fails the test
    with `what` if `timeout` seconds pass first. For conditions no process announces."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(interval)
    return value


def client_prints(cluster, script: str, *lines: str, timeout: float = 300) -> str:
    """Runs `script` as a JAX client of `cluster` and checks that it printed each of
    `lines`; returns its output."""
    out = subprocess.run([sys.executable, "-c", script], env={**os.environ, **cluster.env()},
                         capture_output=True, text=True, timeout=timeout)
    for line in lines:
        assert line in out.stdout, out.stdout + out.stderr[-3000:]
    return out.stdout


def text_of(output: bytes | str | None) -> str:
    """A child's output as TimeoutExpired caught it: bytes even when run with text=True."""
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def stdout_of(proc: subprocess.Popen) -> IO:
    """The output pipe of a process started with stdout=PIPE."""
    assert proc.stdout is not None, "started without stdout=PIPE"
    return proc.stdout


def read_line(proc: subprocess.Popen) -> str:
    """The next line a client process (stdout=PIPE) prints; empty once it has exited."""
    return stdout_of(proc).readline()


def tell(proc: subprocess.Popen, line: str) -> None:
    """Sends a client process (stdin=PIPE) one line, now."""
    assert proc.stdin is not None, "started without stdin=PIPE"
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


class Process:
    """A `switchyard` subprocess whose stderr is collected as it runs."""

    def __init__(self, args: list[str], env: dict | None = None, prefix: list[str] | None = None):
        self.args = args
        # `prefix`: a command that runs the binary (e.g. in a mount namespace of its own).
        self.proc = subprocess.Popen([*(prefix or []), switchyard.find_binary(), *args],
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, **(env or {})})
        self.lines: list[str] = []
        self.address = ""  # where it listens, for those that say (start_rm, start_worker)
        self._cond = threading.Condition()
        self._pump_thread = threading.Thread(target=self._pump, daemon=True)
        self._pump_thread.start()

    def _pump(self):
        for line in stdout_of(self.proc):
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    @property
    def output(self) -> str:
        with self._cond:
            return "".join(self.lines)

    def wait_for(self, text: str, timeout: float = 60) -> str:
        """Waits for a line containing `text`; fails the test if the process exits first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.lines:
                    if text in line:
                        return line
                if self.proc.poll() is not None and not self._pump_alive():
                    raise AssertionError(f"exited ({self.proc.returncode}) before {text!r}:\n"
                                         + "".join(self.lines))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {text!r} within {timeout}s:\n" + "".join(self.lines))
                self._cond.wait(min(left, 0.2))

    def _pump_alive(self) -> bool:
        return self.proc.stdout is not None and not self.proc.stdout.closed and \
            self.proc.poll() is None

    def wait_exit(self, timeout: float = 30) -> int:
        code = self.proc.wait(timeout=timeout)
        self._pump_thread.join(timeout)  # the last lines are in `lines` once it ends
        return code

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def spawn():
    """spawn(args...) -> Process; every process is stopped at the end of the test."""
    started: list[Process] = []

    def _spawn(*args: str, env: dict | None = None, prefix: list[str] | None = None) -> Process:
        process = Process(list(args), env=env, prefix=prefix)
        started.append(process)
        return process

    yield _spawn
    for process in reversed(started):
        process.stop()


@pytest.fixture
def plugin() -> str:
    return switchyard.find_plugin()


def start_rm(spawn, *flags: str, port: int = 0) -> Process:
    """A resource manager on a port it chooses (no race with other tests for a free one);
    `.address` is where it listens. For an RM restarted on the same port, pick `port`."""
    process = spawn("rm", f"--server_port={port}", *flags)
    line = process.wait_for("resource manager listening on ")
    process.address = line.split("resource manager listening on ")[1].split()[0]
    return process


def proxy_address(proxy: Process) -> str:
    """Where a proxy listens (started with --server_port=0: on a port it chose), as
    host:port or unix:PATH; JAX dials grpc://<it>."""
    line = proxy.wait_for("proxy listening on ")
    return line.split("proxy listening on ")[1].split()[0]


@pytest.fixture
def rm(spawn):
    """A running resource manager; `.address` is where it listens."""
    return start_rm(spawn)


@pytest.fixture
def start_worker(spawn, rm, plugin):
    """start_worker(slice, host, port=0, devices=4, extra...) -> Process, registered."""

    def _start(slice_index: int, host_index: int = 0, port: int = 0, devices: int = 4,
               *extra: str, wait: bool = True) -> Process:
        process = spawn("worker", f"--resource_manager_address={rm.address}",
                        f"--server_port={port}", f"--slice_index={slice_index}",
                        f"--host_index={host_index}", f"--pjrt_plugin={plugin}",
                        f"--cpu_device_count={devices}", *extra)
        if wait:
            line = process.wait_for("worker serving on")
            process.address = line.split("worker serving on ")[1].split()[0]
            process.wait_for("registered with the resource manager")
        return process

    return _start


def scrape(process: Process) -> dict[str, float]:
    """The /metrics of a process started with --metrics_port: each sample by its name
    and labels as written (`name{label="value"}`)."""
    found = re.search(r"metrics on (http://\S+/metrics)", process.wait_for("metrics on"))
    assert found, process.output
    return scrape_url(found.group(1))


def dashboard_url(rm: Process) -> str:
    """The dashboard of an RM started with --metrics_port (0: a port it chose), "http://HOST:PORT"."""
    found = re.search(r"dashboard on (http://[^/\s]+)", rm.wait_for("dashboard on http://"))
    assert found, rm.output
    return found.group(1)


def scrape_url(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


def metric_at(url: str, sample: str) -> float:
    """One sample (`name` or `name{label="value"}`) of the /metrics at `url`
    (`LocalCluster(metrics=True).metrics["proxy"]`, ...)."""
    samples = scrape_url(url)
    assert sample in samples, f"no {sample} at {url}"
    return samples[sample]


def fleet(rm_address: str) -> dict:
    import json

    out = subprocess.run([switchyard.find_binary(), "status", "--json",
                          f"--resource_manager_address={rm_address}"],
                         check=True, capture_output=True, text=True, timeout=30).stdout
    return json.loads(out)


def worker_stat(cluster, name: str) -> int:
    """A WorkerStats field (buffers, executions, ...) summed over the cluster's workers."""
    total = 0
    for address in cluster.worker_addresses():
        with switchyard.WorkerClient(address) as worker:
            total += getattr(worker.stats(), name)
    return total


def worker_buffers(cluster):
    """Buffers held by all of the cluster's workers."""
    return worker_stat(cluster, "buffers")
