"""Soak: two clients create, compute, fetch and delete arrays through a local cluster
for `--minutes`, while the resident memory (VmRSS) of every process is sampled.

Starts a LocalCluster (`--workers` x `--devices-per-worker`; each worker is a slice) and
two client processes (soak_client.py, JAX_PLATFORMS=proxy). After a warm-up it fits a
least-squares line to each process's RSS over time and reports the slope in MiB/min, with
the RSS at the start, after the warm-up, at the end and once the clients have gone. Fails
(exit 1) when a client fails or falls silent, a server process dies, a Switchyard process
(up, rm, proxy, workers) grows faster than `--max-growth-mib-per-min` (clients are
reported, not judged), or the workers still hold buffers or executables after the clients
have gone. `--json PATH` writes every number, samples included.

    ./dev soak                      # 3 minutes (bound: 15 MiB/min, the noise of so short a run)
    ./dev soak --minutes 60         # the hour-long run; goal: <= 1 MiB/min per process
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import subprocess
import sys
import threading
import time

import numpy as np

import switchyard
from switchyard.cluster import find_binary

HERE = pathlib.Path(__file__).resolve().parent
CLIENT = HERE / "soak_client.py"
SILENCE_S = 120.0  # a client that says nothing for this long is hung
CLIENT_EXIT_S = 180.0  # after the soak: start-up lag, its last iteration, shutdown
DRAIN_S = 60.0  # for the workers to free what the clients held
# MiB/min. The goal holds a run of an hour (or half of one) to it. Over a few minutes a
# worker's RSS wanders by +-15 MiB around a flat line (programs compiled and freed,
# buffers in flight, the allocator keeping and returning memory), which puts the slope
# of a 3-minute run anywhere in about -6..+11 MiB/min with nothing growing: short runs
# get a bound above that (see tests/e2e/test_soak.py).
GOAL = 1.0
GOAL_FROM_MINUTES = 30.0
SHORT_BOUND = 15.0


def rss_kib(pid: int) -> int | None:
    """VmRSS of `pid` in KiB; None if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


class Tracked:
    """A process whose RSS is sampled: (seconds since the clients started, MiB) pairs."""

    def __init__(self, name: str, pid: int, judged: bool):
        self.name, self.pid, self.judged = name, pid, judged
        self.samples: list[tuple[float, float]] = []
        self.idle_mib: float | None = None

    def sample(self, t: float) -> bool:
        kib = rss_kib(self.pid)
        if kib is not None:
            self.samples.append((t, kib / 1024))
        return kib is not None

    def at(self, t: float) -> float | None:
        """The first sample at or after `t`."""
        return next((m for s, m in self.samples if s >= t), None)

    def slope(self, t0: float) -> float | None:
        """Least-squares RSS growth, MiB per minute, over the samples from `t0` on."""
        points = [(s, m) for s, m in self.samples if s >= t0]
        if len(points) < 3:
            return None
        t, m = np.array(points).T
        return float(np.polyfit(t / 60.0, m, 1)[0])


class Client:
    """A soak_client.py process; its JSON lines and the tail of its stderr are kept."""

    def __init__(self, cluster: switchyard.LocalCluster, name: str, seconds: float, seed: int,
                 compile_every: int):
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, str(CLIENT), "--seconds", str(seconds), "--name", name,
             "--seed", str(seed), "--compile-every", str(compile_every)],
            env={**os.environ, **cluster.env()}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        self.last: dict = {}
        self.error: str | None = None
        self.heard = time.monotonic()
        self.stderr: collections.deque[str] = collections.deque(maxlen=60)
        self._threads = [threading.Thread(target=self._pump_stdout, daemon=True),
                         threading.Thread(target=self._pump_stderr, daemon=True)]
        for thread in self._threads:
            thread.start()

    def _pump_stdout(self):
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not line.startswith("{"):
                continue
            try:
                message = json.loads(line)
            except ValueError:
                continue
            self.heard = time.monotonic()
            if "error" in message:
                self.error = message["error"]
            else:
                self.last = message

    def _pump_stderr(self):
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip("\n"))

    @property
    def done(self) -> bool:
        return bool(self.last.get("done"))

    def counts(self) -> dict:
        return {k: self.last.get(k, 0) for k in ("iterations", "compiles", "moves")}

    def finish(self, timeout: float) -> int | None:
        """Waits for the exit (killing it past `timeout`); the exit status, None if killed."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
            code = None
        for thread in self._threads:
            thread.join(timeout=5)
        return code

    def report(self) -> str:
        return f"{self.name}: {self.error or 'no error line'}\n  " + "\n  ".join(self.stderr)


def worker_addresses(cluster: switchyard.LocalCluster) -> dict[int, str]:
    out = subprocess.run([find_binary(), "status", "--json",
                          f"--resource_manager_address={cluster.rm_address}"],
                         check=True, capture_output=True, text=True, timeout=30).stdout
    return {s["slice_index"]: host["address"]
            for s in json.loads(out)["slices"] for host in s["hosts"]}


def worker_totals(workers: dict[int, switchyard.WorkerClient]) -> tuple[int, int]:
    """(buffers, executables) held over all workers."""
    buffers = executables = 0
    for worker in workers.values():
        stats = worker.stats()
        buffers += stats.buffers
        executables += stats.executables
    return buffers, executables


def table(processes: list[Tracked], warmup_s: float, end_s: float) -> str:
    def mib(v):
        return "-" if v is None else f"{v:.1f}"

    rows = [("process", "pid", "start MiB", "warm MiB", "end MiB", "idle MiB", "MiB/min", "judged")]
    for p in processes:
        slope = p.slope(warmup_s)
        rows.append((p.name, str(p.pid), mib(p.samples[0][1] if p.samples else None),
                     mib(p.at(warmup_s)), mib(p.samples[-1][1] if p.samples else None),
                     mib(p.idle_mib), "-" if slope is None else f"{slope:+.2f}",
                     "yes" if p.judged else "no"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    lines.append(f"(slope fitted over t = {warmup_s:.0f}..{end_s:.0f} s; start: t = 0, warm: "
                 f"t = {warmup_s:.0f} s, end: the last sample, idle: after the clients left)")
    return "\n".join(lines)


def soak(args) -> dict:
    duration = args.minutes * 60.0
    warmup = args.warmup_s if args.warmup_s is not None else min(0.25 * duration, 60.0)
    failures: list[str] = []
    processes: list[Tracked] = []
    clients: list[Client] = []
    workers: dict[int, switchyard.WorkerClient] = {}
    peak_buffers = peak_executables = 0
    idle: tuple[int, int] | tuple[None, None] = (None, None)
    with switchyard.LocalCluster(workers=args.workers,
                                 devices_per_worker=args.devices_per_worker) as cluster:
        try:
            addresses = worker_addresses(cluster)
            processes.append(Tracked("up", cluster.pid, True))
            processes.append(Tracked("rm", cluster.child_pid("rm"), True))
            processes.append(Tracked("proxy", cluster.child_pid("proxy"), True))
            for s in sorted(addresses):
                processes.append(Tracked(f"worker {s}", cluster.child_pid("worker", s), True))
                workers[s] = switchyard.WorkerClient(addresses[s])
            print(f"soak: {args.minutes:g} min, {args.workers} workers x "
                  f"{args.devices_per_worker} devices, 2 clients; warm-up {warmup:.0f} s",
                  flush=True)
            start = time.monotonic()
            clients = [Client(cluster, f"client {i}", duration, seed=i,
                              compile_every=args.compile_every) for i in range(2)]
            processes += [Tracked(c.name, c.proc.pid, False) for c in clients]
            last_print = 0.0
            while not failures:
                t = time.monotonic() - start
                for p in processes:
                    if not p.sample(t) and p.judged:
                        failures.append(f"{p.name} (pid {p.pid}) died")
                try:
                    buffers, executables = worker_totals(workers)
                    peak_buffers = max(peak_buffers, buffers)
                    peak_executables = max(peak_executables, executables)
                except switchyard.WorkerError as e:
                    failures.append(f"worker stats: {e}")
                for c in clients:
                    if c.error or c.proc.poll() is not None:
                        failures.append(f"{c.name} failed (exit {c.proc.poll()}): {c.error}")
                    elif time.monotonic() - c.heard > SILENCE_S:
                        failures.append(f"{c.name} silent for {SILENCE_S:.0f} s")
                if t >= duration:
                    break
                if t - last_print >= 30:
                    last_print = t
                    print(f"  t={t:4.0f}s  " + "  ".join(
                        f"{c.name}: {c.counts()['iterations']} it" for c in clients) + "  " +
                        "  ".join(f"{p.name} {p.samples[-1][1]:.0f}" for p in processes
                                  if p.judged and p.samples) + " MiB", flush=True)
                time.sleep(max(0.0, min(args.sample_s, duration - t)))
            for c in clients:
                code = c.finish(CLIENT_EXIT_S if not failures else 10.0)
                if code is None:
                    failures.append(f"{c.name} did not exit within {CLIENT_EXIT_S:.0f} s")
                elif code != 0 or not c.done:
                    failures.append(f"{c.name} exit {code}: {c.error or 'no done line'}")
            if not failures:
                deadline = time.monotonic() + DRAIN_S
                while (idle := worker_totals(workers)) != (0, 0):
                    if time.monotonic() > deadline:
                        failures.append(f"workers still hold {idle[0]} buffers and {idle[1]} "
                                        f"executables {DRAIN_S:.0f} s after the clients left")
                        break
                    time.sleep(0.5)
                time.sleep(args.sample_s)
                for p in processes:
                    if p.judged:
                        kib = rss_kib(p.pid)
                        p.idle_mib = None if kib is None else kib / 1024
        finally:
            for c in clients:
                if c.proc.poll() is None:
                    c.proc.kill()
                    c.proc.wait(timeout=30)
            for worker in workers.values():
                worker.close()
    slopes = {p.name: p.slope(warmup) for p in processes}
    for p in processes:
        slope = slopes[p.name]
        if p.judged and slope is not None and slope > args.max_growth_mib_per_min:
            failures.append(f"{p.name} grew {slope:.2f} MiB/min "
                            f"(bound {args.max_growth_mib_per_min:g})")
    if not failures and any(slopes[p.name] is None for p in processes if p.judged):
        failures.append("too few samples after the warm-up to fit a slope")
    report = table(processes, warmup, processes[-1].samples[-1][0] if processes and
                   processes[-1].samples else 0.0)
    return {
        "minutes": args.minutes, "warmup_s": warmup, "sample_s": args.sample_s,
        "max_growth_mib_per_min": args.max_growth_mib_per_min,
        "workers": args.workers, "devices_per_worker": args.devices_per_worker,
        "passed": not failures, "failures": failures, "table": report,
        "clients": {c.name: {**c.counts(), "done": c.done, "exit": c.proc.returncode,
                             "error": c.error, "stderr_tail": list(c.stderr)[-20:]}
                    for c in clients},
        "worker_objects": {"peak_buffers": peak_buffers, "peak_executables": peak_executables,
                           "idle_buffers": idle[0], "idle_executables": idle[1]},
        "processes": [{"name": p.name, "pid": p.pid, "judged": p.judged,
                       "start_mib": p.samples[0][1] if p.samples else None,
                       "warm_mib": p.at(warmup),
                       "end_mib": p.samples[-1][1] if p.samples else None,
                       "idle_mib": p.idle_mib, "slope_mib_per_min": slopes[p.name],
                       "samples": [[round(t, 2), round(m, 3)] for t, m in p.samples]}
                      for p in processes],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--max-growth-mib-per-min", type=float, default=None,
                        help="fail if a Switchyard process's RSS grows faster (default: the "
                        f"goal, {GOAL:g}, from {GOAL_FROM_MINUTES:g} minutes on; {SHORT_BOUND:g} "
                        "for shorter runs, whose slopes are noisier)")
    parser.add_argument("--json", metavar="PATH", help="write the results here")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--devices-per-worker", type=int, default=2)
    parser.add_argument("--compile-every", type=int, default=25,
                        help="each client compiles a new program every N iterations")
    parser.add_argument("--sample-s", type=float, default=2.0, help="RSS sampling period")
    parser.add_argument("--warmup-s", type=float, default=None,
                        help="left out of the fit (default: a quarter of the run, at most 60 s)")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.compile_every < 1 or args.sample_s <= 0:
        parser.error("--minutes, --compile-every and --sample-s must be positive")
    if args.max_growth_mib_per_min is None:
        args.max_growth_mib_per_min = GOAL if args.minutes >= GOAL_FROM_MINUTES else SHORT_BOUND
    result = soak(args)
    print(result["table"])
    for name, c in result["clients"].items():
        print(f"{name}: {c['iterations']} iterations, {c['compiles']} new programs, "
              f"{c['moves']} moves to another slice")
    w = result["worker_objects"]
    print(f"workers: at most {w['peak_buffers']} buffers and {w['peak_executables']} "
          f"executables held; after the clients left: {w['idle_buffers']} and "
          f"{w['idle_executables']}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1))
    for failure in result["failures"]:
        print(f"FAIL: {failure}")
    for name, c in result["clients"].items():
        if c["error"] or c["exit"] != 0:
            print(f"{name} stderr (tail):\n  " + "\n  ".join(c["stderr_tail"]))
    print("PASS" if result["passed"] else "FAIL")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
