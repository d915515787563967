"""Switchyard's benchmark suite: every system measured side by side in one run on
this machine, reported as ratios against the baselines of the same run.

    ./dev bench            (or: .venv/bin/python bench/run.py [--quick])

Writes bench/results/latest.md (tables), latest.json and PNG plots.
"""

import argparse
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "python"))
import switchyard  # noqa: E402
from procs import children, cpu_seconds_of  # noqa: E402
from scale import plot_scale, render_scale, scale  # noqa: E402
from switchyard.worker_client import WorkerClient  # noqa: E402

PER_SLICE = 2  # devices per worker: XLA CPU collectives need a thread per device


def case(system, name, *args, env=None, timeout=900):
    return run_case([sys.executable, str(HERE / "cases.py"), system, name, *map(str, args)],
                    env=env, timeout=timeout)


def run_case(cmd, env=None, timeout=900):
    """Runs one client process; returns what it printed after `RESULT `."""
    result = subprocess.run(cmd, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                            timeout=timeout)
    for line in result.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{' '.join(cmd)} failed:\n{result.stderr[-3000:]}")


def multiclient(cluster, clients, k, seconds):
    procs = [subprocess.Popen([sys.executable, str(HERE / "cases.py"), "proxy", "client_load",
                               "--ks", str(k), "--seconds", str(seconds)],
                              env={**os.environ, **cluster.env()}, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for _ in range(clients)]
    for p in procs:
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "READY"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    done = 0
    for p in procs:
        out, _ = p.communicate(timeout=seconds * 10 + 120)
        done += json.loads(out.split("RESULT ", 1)[1])["programs"]
    return done


def several_clients(calib, seconds):
    """1, 2, 4, 8 and 16 clients of one proxy, each chaining ~0.33 ms programs on the same
    device: the device's busy part (programs completed times their time in JAX's
    in-process CPU backend, over the wall time)."""
    k = min((int(k) for k in calib), key=lambda k: abs(calib[str(k)] - 0.33e-3))
    out: dict[str | int, float] = {"program_s": calib[str(k)]}  # and busy by client count
    with switchyard.LocalCluster(workers=1, devices_per_worker=1) as c:
        for n in (1, 2, 4, 8, 16):
            out[n] = multiclient(c, n, k, seconds) * calib[str(k)] / seconds
    return out


def render_several_clients(m):
    lines = [f"## Several clients, one device ({m['program_s'] * 1e3:.2f} ms programs)\n",
             "Busy: programs completed times their time in JAX's in-process CPU backend, over "
             "the wall time (above 100% where the CPU client runs two launches side by side "
             "on the host's cores). Ratio: programs/s against one client alone.\n",
             "| clients | device busy | ratio to 1 client |", "|---|---|---|"]
    for n in (1, 2, 4, 8, 16):
        if n in m:
            lines.append(f"| {n} | {m[n]:.0%} | {m[n] / m[1]:.2f}x |")
    return "\n".join(lines) + "\n"


def flood(launches, seconds):
    """A client's synchronous call, alone and while another client of the same proxy floods
    the same device with launches it never waits on (issue 30's goal: at most 2x)."""
    def run(mode, amount, env):
        return subprocess.Popen([sys.executable, str(HERE / "flood_cases.py"), mode, str(amount)],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True)

    def result(p, timeout):
        out, _ = p.communicate(timeout=timeout)
        return json.loads(out.split("RESULT ", 1)[1])

    with switchyard.LocalCluster(workers=1, devices_per_worker=1) as c:
        env = {**os.environ, **c.env()}
        proxy = c.child_pid("proxy")
        alone = result(run("sync", seconds, env), seconds * 10 + 120)
        base_kib = rss_kib(proxy)
        flooder = run("flood", launches, env)
        time.sleep(2)  # it is issuing
        syncer = run("sync", seconds, env)
        peak_kib = base_kib
        while syncer.poll() is None:
            peak_kib = max(peak_kib, rss_kib(proxy) or 0)
            time.sleep(0.2)
        during = result(syncer, 60)
        flooding = flooder.poll() is None
        flooded = result(flooder, launches * 0.01 + 300)
    return {"alone": alone, "during": during, "flood_still_running": flooding,
            "flood_launches_per_s": flooded["launches_per_s"],
            "proxy_rss_growth_mib": (peak_kib - base_kib) / 1024}


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def render_flood(r):
    f = r["flood"]
    ratio = f["during"]["p50_s"] / f["alone"]["p50_s"]
    return "\n".join([
        "## A client floods, another waits on each call\n",
        "One worker, one CPU device, one proxy. Client A launches programs of about 0.3 ms "
        "without ever waiting; client B, meanwhile, runs a small program and waits for each "
        "result. Goal (issue 30): B's calls at most 2x their time alone; the proxy's memory "
        "bounded.\n",
        "| | B's first call (with its compile) | B's call, median | B's slowest | "
        "median's ratio to alone |", "|---|---|---|---|---|",
        f"| B alone | {f['alone']['first_s'] * 1e3:.0f} ms | {f['alone']['p50_s'] * 1e3:.1f} ms | "
        f"{f['alone']['max_s'] * 1e3:.1f} ms | 1.0x |",
        f"| B while A floods | {f['during']['first_s'] * 1e3:.0f} ms | "
        f"{f['during']['p50_s'] * 1e3:.1f} ms | {f['during']['max_s'] * 1e3:.1f} ms | "
        f"{ratio:.1f}x |",
        "",
        f"A's launches: {f['flood_launches_per_s']:.0f}/s; A was still flooding when B ended: "
        f"{'yes' if f['flood_still_running'] else 'no (B measured part of it)'}; the proxy's "
        f"memory grew {f['proxy_rss_growth_mib']:.1f} MiB meanwhile."]) + "\n"


def cpu_of_children(parent_pid):
    """CPU seconds so far of each child of `parent_pid`, by role (threads that ended
    included)."""
    cpu: dict[str, float] = {}
    for pid, role in children(parent_pid):
        cpu[role] = cpu.get(role, 0.0) + cpu_seconds_of(f"/proc/{pid}/stat")
    return cpu


def threads_of_children(parent_pid):
    """CPU seconds and context switches so far of each thread of the proxy and workers
    under `parent_pid`, by (role, thread name)."""
    threads: dict[str, list[float]] = {}  # [CPU seconds, context switches]
    for pid, role in children(parent_pid):
        if role not in ("proxy", "worker"):
            continue
        for task in pathlib.Path(f"/proc/{pid}/task").glob("*"):
            try:
                name = (task / "comm").read_text().strip()
                cpu = cpu_seconds_of(task / "stat")
                status = dict(line.split(":\t", 1)
                              for line in (task / "status").read_text().splitlines()
                              if ":\t" in line)
            except OSError:  # the thread ended meanwhile
                continue
            row = threads.setdefault(f"{role} {name}", [0.0, 0])
            row[0] += cpu
            row[1] += (int(status["voluntary_ctxt_switches"])
                       + int(status["nonvoluntary_ctxt_switches"]))
    return threads


def latency_with_cpu(cluster, iters):
    """The latency case, plus the CPU each process spends per synchronous call, and each
    thread's CPU and context switches per call (the profile of where it goes)."""
    proc = subprocess.Popen([sys.executable, str(HERE / "cases.py"), "proxy", "latency", "--iters",
                             str(iters), "--signal_sync"], env={**os.environ, **cluster.env()},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    assert proc.stdout.readline().strip() == "SYNC"
    before, threads_before = cpu_of_children(cluster.pid), threads_of_children(cluster.pid)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "SYNC DONE"
    after, threads_after = cpu_of_children(cluster.pid), threads_of_children(cluster.pid)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "PIPELINED DONE"
    piped = cpu_of_children(cluster.pid)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    out, _ = proc.communicate(timeout=600)
    result = json.loads(out.split("RESULT ", 1)[1])
    result["sync_server_cpu_us"] = {role: (after[role] - before.get(role, 0.0)) / iters * 1e6
                                    for role in after if role in ("proxy", "worker")}
    result["pipelined_server_cpu_us"] = {role: (piped[role] - after.get(role, 0.0)) / iters * 1e6
                                         for role in piped if role in ("proxy", "worker")}
    result["sync_threads"] = {
        name: {"cpu_us": (cpu - threads_before.get(name, [0.0, 0])[0]) / iters * 1e6,
               "switches": (switches - threads_before.get(name, [0.0, 0])[1]) / iters}
        for name, (cpu, switches) in threads_after.items()}
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--only", choices=["checkpoint", "colocated", "compile_cache",
                                           "data_plane", "flood", "pool", "several_clients",
                                           "rl", "scale", "shares", "transport"],
                        help="run one section and write its own report")
    args = parser.parse_args()
    # One section, with a report of its own: name -> (title, run, render).
    sections = {"pool": ("shared pool", lambda: pool(seconds=3 if args.quick else 6), render_pool),
                "shares": ("device time by tenant shares", lambda: [
                    shares(5 if args.quick else 15, w, one_proxy)
                    for one_proxy in (False, True) for w in ((1, 1, 1, 1), (1, 2, 4, 8))],
                    render_shares),
                "compile_cache": ("compilation cache", compile_cache, render_compile_cache),
                "several_clients": ("several clients, one device",
                                    lambda: several_clients(
                                        case("local", "calibrate", "--ks", 1, 4, 16, 64),
                                        3 if args.quick else 5),
                                    lambda r: render_several_clients(r["several_clients"])),
                "flood": ("one client floods, another waits",
                          lambda: flood(30000 if args.quick else 60000, 4 if args.quick else 6),
                          render_flood),
                "checkpoint": ("checkpoints written by the workers",
                               lambda: checkpoint([16, 64] if args.quick else [16, 64, 256]),
                               render_checkpoint),
                "colocated": ("colocated Python",
                              lambda: colocated([1, 16] if args.quick else [1, 16, 64]),
                              render_colocated),
                "transport": ("private Unix sockets against TCP, sandboxed sidecars against "
                              "unconfined", lambda: transport(2 if args.quick else 3),
                              render_transport),
                "data_plane": ("buffers between workers: the bulk data plane against gRPC",
                               lambda: data_plane(2 if args.quick else 3), render_data_plane),
                "rl": ("Tunix RL across slices: weight sync, small fetches, GRPO steps",
                       lambda: rl(args.quick), render_rl),
                "scale": ("the control plane over hundreds of simulated hosts",
                          lambda: scale([16, 128] if args.quick else [16, 128, 1000]),
                          render_scale)}
    if args.only in sections:
        title, run, render_section = sections[args.only]
        r: dict[str, Any] = {
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        r[args.only] = run()
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        report = f"# Switchyard benchmarks: {title}\n\n" + \
            f"Machine: {r['machine']}. Run: {r['date']}.\n\n" + render_section(r)
        (out / f"{args.only}.md").write_text(report)
        (out / f"{args.only}.json").write_text(json.dumps(r, indent=1))
        if args.only == "scale":
            plot_scale(r, out)
        print(report)
        return
    quick = args.quick
    iters, reps = (100, 2) if quick else (300, 5)
    sizes = [1, 16, 64] if quick else [1, 4, 16, 64, 256, 1024]
    ks = [1, 4, 16, 64, 256, 1024, 4096]
    r = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
         "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    started = time.time()

    print("== baselines: JAX in-process CPU, raw gRPC, Ray", flush=True)
    r["local_micro"] = {s: case("local", "micro", "--slices", s, "--per_slice", PER_SLICE,
                                "--iters", iters, "--reps", reps) for s in (1, 2, 4)}
    r["local_latency"] = case("local", "latency", "--iters", 1000)
    calib = case("local", "calibrate", "--ks", *ks)
    r["durations_s"] = calib
    r["local_crossover"] = {s: case("local", "crossover", "--slices", s, "--ks", *ks,
                                    "--durations", json.dumps(calib)) for s in (1, 2, 4)}
    r["grpc"] = {str(m): json.loads(subprocess.run(
        [str(ROOT / "build" / "bench" / "grpc_stream_bench"), str(m), str(reps)],
        capture_output=True, text=True, check=True).stdout) for m in sizes}
    # MB/s of one raw stream socket between two processes: the data plane's ceiling.
    r["raw_stream"] = {family: raw_stream(family, 256, 3) for family in ("tcp", "unix")}
    r["grpc_pingpong"] = json.loads(subprocess.run(
        [str(ROOT / "build" / "bench" / "grpc_pingpong_bench"), str(2000 if quick else 20000)],
        capture_output=True, text=True, check=True).stdout)
    try:
        done = subprocess.run([sys.executable, str(HERE / "ray_cases.py")], capture_output=True,
                              text=True, timeout=600)
        if "RESULT " not in done.stdout:
            raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else
                               f"exit status {done.returncode}")
        r["ray"] = json.loads(done.stdout.split("RESULT ", 1)[1])
    except Exception as e:  # Ray is optional; say why it is missing
        r["ray"] = {"error": str(e)[:300]}
    # Ray's daemons linger a while after its driver exits; what follows needs the cores.
    for _ in range(60):
        if subprocess.run(["pgrep", "-f", "raylet|gcs_server"], capture_output=True).returncode:
            break
        time.sleep(0.5)

    r["switchyard_micro"] = {}
    # Memory-backed, as in a Pathways head pod: the client's large-transfer path.
    large_transfers = tempfile.mkdtemp(prefix="sy-bench-lt-", dir="/dev/shm")
    for workers in (1, 2, 4):
        print(f"== Switchyard, {workers} workers", flush=True)
        metrics_port = switchyard.cluster.free_port()
        with switchyard.LocalCluster(workers=workers, devices_per_worker=PER_SLICE,
                                     large_transfer_directory=large_transfers,
                                     flags=(f"--metrics_port={metrics_port}",)) as c:
            r["switchyard_micro"][workers] = case(
                "proxy", "micro", "--slices", workers, "--per_slice", PER_SLICE, "--iters", iters,
                "--reps", reps, env=c.env())
            if workers == 2:
                r["switchyard_latency"] = latency_with_cpu(c, 1000)
                r["switchyard_bandwidth"] = case("proxy", "bandwidth", "--sizes", *sizes, "--reps",
                                                 reps, env=c.env())
                # The same puts through files the proxy takes (every size: threshold 0).
                disk = case("proxy", "bandwidth", "--sizes", *sizes, "--reps", reps, "--h2d_only",
                            env={**c.env(), "IFRT_PROXY_GRPC_LARGE_TRANSFER_"
                                 "OPTIMIZATION_THRESHOLD_BYTES": "0"})
                for m, v in disk.items():
                    r["switchyard_bandwidth"][m]["disk_h2d"] = v["h2d"]
                r["copies"] = copies(c, metrics_port, workers, 64 if quick else 256)
            r.setdefault("switchyard_crossover", {})[workers] = case(
                "proxy", "crossover", "--slices", workers, "--ks", *ks, "--durations",
                json.dumps(calib), env=c.env())
    shutil.rmtree(large_transfers, ignore_errors=True)
    print("== Switchyard, several clients on one device", flush=True)
    r["multiclient"] = several_clients(calib, 3 if quick else 5)
    print("== Colocated Python and checkpoints", flush=True)
    r["colocated"] = colocated([16] if quick else [16, 64])
    r["checkpoint"] = checkpoint([64] if quick else [64, 256])
    print("== Compilation cache: cold, warm, after a restart with another size", flush=True)
    r["compile_cache"] = compile_cache()
    print("== Switchyard, elasticity: kill -9 a slice's worker under elastic training", flush=True)
    r["elastic"] = [elasticity() for _ in range(1 if quick else 3)]
    print("== Tunix RL across slices: weight sync, small fetches, GRPO", flush=True)
    r["rl"] = rl(quick)
    r["elapsed_s"] = time.time() - started
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "latest.json").write_text(json.dumps(r, indent=1))
    report = render(r) + "\n## Tunix RL across slices\n\n" + render_rl(r)
    (out / "latest.md").write_text(report)
    plot(r, out)
    print(report)


def compile_cache(layers=80):
    """Compile times of one model: JAX's in-process CPU backend without and with its own
    persistent cache, and Switchyard cold, from its cache in a second client process, and
    after the cluster restarted with another number of workers (each a new process)."""
    import tempfile
    args = ("--layers", layers)
    out = {}
    with tempfile.TemporaryDirectory() as local_dir, tempfile.TemporaryDirectory() as scratch:
        env = {"JAX_COMPILATION_CACHE_DIR": local_dir,
               "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
               "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
        out["local_cold"] = case("local", "compile_time", *args, env=env)
        out["local_warm"] = case("local", "compile_time", *args, env=env)
        with switchyard.LocalCluster(workers=2, devices_per_worker=PER_SLICE,
                                     gcs_scratch_location=scratch) as c:
            out["switchyard_cold"] = case("proxy", "compile_time", *args, env=c.env())
            out["switchyard_warm"] = case("proxy", "compile_time", *args, env=c.env())
        with switchyard.LocalCluster(workers=1, devices_per_worker=PER_SLICE,
                                     gcs_scratch_location=scratch) as c:
            out["switchyard_restarted"] = case("proxy", "compile_time", *args, env=c.env())
    return out


def pool(seconds):
    """Four sessions of a 4-slice pool (--virtual_slices=cpu:1), each running chained
    programs on the slice it leased, against one session alone on a cluster of one slice
    (no leases) in the same run; then how long a fifth, queued session waits once a lease
    ends, and what a lease adds to a session's start."""
    ks = [1, 4, 16, 64, 256, 1024]
    calib = case("local", "calibrate", "--ks", *ks)
    k = min(ks, key=lambda k: abs(calib[str(k)] - 1e-3))  # ~1 ms programs
    program_s = calib[str(k)]
    out = {"program_s": program_s}

    def start(cluster, case_name, *extra):
        return subprocess.Popen([sys.executable, str(HERE / "cases.py"), "proxy", case_name,
                                 *map(str, extra)], env={**os.environ, **cluster.env()},
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)

    def start_s(cluster, n):
        """Seconds from process start to READY for `n` sessions started together."""
        t = time.time()
        procs = [start(cluster, "hold") for _ in range(n)]
        for p in procs:
            assert p.stdout is not None
            assert p.stdout.readline().strip() == "READY"
        took = time.time() - t
        for p in procs:
            p.communicate("go\n", timeout=60)
        return took

    with switchyard.LocalCluster(workers=1, devices_per_worker=1) as c:
        out["alone_busy"] = multiclient(c, 1, k, seconds) * program_s / seconds
        out["alone_start_s"] = start_s(c, 1)
    with switchyard.LocalCluster(workers=4, devices_per_worker=1, virtual_slices="cpu:1") as c:
        out["pool_start_s"] = start_s(c, 1)
        out["pool_busy"] = multiclient(c, 4, k, seconds) * program_s / (4 * seconds)
        holders = [start(c, "hold") for _ in range(4)]
        for p in holders:
            assert p.stdout is not None
            assert p.stdout.readline().strip() == "READY"
        fifth = start(c, "hold")
        time.sleep(2)  # queued by now
        closed = json.loads(holders[0].communicate("go\n", timeout=60)[0].split("RESULT ", 1)[1])
        assert fifth.stdout is not None
        assert fifth.stdout.readline().strip() == "READY"
        placed = json.loads(fifth.communicate("go\n", timeout=60)[0].split("RESULT ", 1)[1])
        out["queue_wait_s"] = placed["placed_at"] - closed["closed_at"]
        for p in holders[1:]:
            p.communicate("go\n", timeout=60)
    return out


def shares(seconds, weights, one_proxy=False):
    """Four tenants share every slice of a 4-slice pool (no leases), each through a proxy
    of its own (as Pathways gives each user one) or all through one (`one_proxy`: their
    sessions then share the proxy's connections to the workers), each running a chain of
    programs on every device; the RM's --tenant_shares are `weights`. Returns each
    tenant's part of the device time spent on the programs its client completed."""
    import hashlib
    import socket
    import tempfile
    ks = [16, 64, 256, 1024, 4096]
    calib = case("local", "calibrate", "--ks", *ks)
    k = min(ks, key=lambda k: abs(calib[str(k)] - 3e-3))  # ~3 ms programs
    tenants = ["alice", "bob", "carol", "dave"]
    with tempfile.TemporaryDirectory() as tmp:
        tokens = pathlib.Path(tmp) / "tokens"
        tokens.write_text("".join(f"{t} sha256:{hashlib.sha256(t.encode()).hexdigest()}\n"
                                  for t in tenants))
        flags = (f"--tokens_file={tokens}",
                 "--tenant_shares=" + ",".join(f"{t}:{w}" for t, w in zip(tenants, weights)))
        with switchyard.LocalCluster(workers=4, devices_per_worker=1, flags=flags) as c:
            proxies, targets = [], [c.target]
            if one_proxy:
                targets *= len(tenants)
            try:
                for _ in tenants[len(targets):]:
                    port = switchyard.cluster.free_port()
                    proxies.append(subprocess.Popen(
                        [switchyard.cluster.find_binary(), "proxy", f"--server_port={port}",
                         f"--resource_manager_address={c.rm_address}", f"--tokens_file={tokens}"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                    targets.append(f"grpc://127.0.0.1:{port}")
                    deadline = time.time() + 60
                    while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
                        assert time.time() < deadline, "a proxy did not start"
                        time.sleep(0.1)
                procs = [subprocess.Popen(
                    [sys.executable, str(HERE / "cases.py"), "proxy", "client_load", "--ks", str(k),
                     "--seconds", str(seconds), "--device", "-1", "--depth", "16",
                     "--tail", str(seconds / 2)],
                    env={**os.environ, **c.env(), "JAX_BACKEND_TARGET": target,
                         "SWITCHYARD_TOKEN": tenant},
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                    text=True) for tenant, target in zip(tenants, targets)]
                for p in procs:
                    assert p.stdout is not None
                    assert p.stdout.readline().strip() == "READY"

                def measured():  # the workers' own account, by tenant
                    total = dict.fromkeys(tenants, 0.0)
                    for address in c.worker_addresses():
                        with WorkerClient(address) as w:
                            for tenant, s in w.stats().device_seconds.items():
                                total[tenant] = total.get(tenant, 0.0) + s
                    return total
                for p in procs:
                    assert p.stdin is not None
                    p.stdin.write("go\n")
                    p.stdin.flush()
                # Over the middle of the run, while every client is loading: each starts
                # when it reads "go" and loads for `seconds` * 1.5.
                time.sleep(seconds * 0.25)
                before = measured()
                time.sleep(seconds * 0.75)
                after = measured()
                done = [json.loads(p.communicate(timeout=seconds * 10 + 120)[0]
                                   .split("RESULT ", 1)[1]) for p in procs]
            finally:
                for proxy in proxies:
                    proxy.terminate()
                    proxy.wait(timeout=30)
    busy = [d["programs"] * calib[str(k)] for d in done]
    return {"program_s": calib[str(k)], "weights": list(weights), "one_proxy": one_proxy,
            "device_s": busy, "wall_s": max(d["seconds"] for d in done),
            "worker_device_s": [after[t] - before[t] for t in tenants]}


def render_pool(r):
    p = r["pool"]
    return "\n".join([
        "## Shared pool (--virtual_slices=cpu:1; programs of "
        f"{p['program_s'] * 1e3:.2f} ms chained on one device)\n",
        "Busy is the device time of the programs a client completed over the wall time "
        "(from JAX's in-process CPU timing of the same program). On a machine with fewer "
        "cores than the pool's slices, four workers share the cores, so four sessions "
        "cannot each keep a device as busy as one session alone.\n",
        "| measure | one session alone (1 slice, no lease) | 4 sessions of a 4-slice pool | "
        "ratio |", "|---|---|---|---|",
        f"| device busy, per session | {p['alone_busy']:.0%} | {p['pool_busy']:.0%} | "
        f"{p['pool_busy'] / p['alone_busy']:.2f} |",
        f"| session start to devices (s) | {p['alone_start_s']:.2f} | {p['pool_start_s']:.2f} "
        f"| {p['pool_start_s'] / p['alone_start_s']:.2f} |",
        "",
        f"A fifth session, queued while four held the pool, was placed "
        f"{p['queue_wait_s'] * 1e3:.0f} ms after one of them closed its session (its stream "
        "ending, the RM's release and placement, the fifth's Init answer and its first "
        "`jax.devices()`).", ""])


def render_shares(r):
    lines = ["## Device time by tenant shares (4 tenants, a proxy each or one for all, on "
             "every slice of a 4-slice pool; chained programs of "
             f"{r['shares'][0]['program_s'] * 1e3:.1f} ms)\n",
             "The RM's `--tenant_shares` set the shares; the workers order launches by them. "
             "Measured is the workers' own account of each tenant's device time (each "
             "launch's wall time on its devices, summed over the four workers) while all "
             "four clients load the pool; its part is that over all four. The last column "
             "counts instead the programs each client completed (times the program's time "
             "in JAX's in-process CPU backend), in rounds of 64, so it is coarse for small "
             "parts.\n",
             "| proxies | shares | tenant | expected part | measured part | measured / expected | "
             "client's count |", "|---|---|---|---|---|---|---|"]
    for run in r["shares"]:
        total_w, total_s = sum(run["weights"]), sum(run["device_s"])
        label = ("one | " if run.get("one_proxy") else "a proxy each | ") + \
            ":".join(str(w) for w in run["weights"])
        total_m = sum(run["worker_device_s"])
        for name, w, s, m in zip(["alice", "bob", "carol", "dave"], run["weights"],
                                 run["device_s"], run["worker_device_s"]):
            lines.append(f"| {label} | {name} | {w / total_w:.1%} | {m / total_m:.1%} | "
                         f"{(m / total_m) / (w / total_w):.2f} | {s / total_s:.1%} |")
        busy = total_s / (4 * run["wall_s"])
        lines.append(f"| {label} | all | | devices busy {busy:.0%} | | |")
    return "\n".join(lines) + "\n"


def metrics_of(port):
    """A process's /metrics samples: {'name{labels}': value}."""
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


def proxy_client_bytes(port):
    """The proxy's switchyard_proxy_client_bytes_total, by direction."""
    return {name.split('direction="')[1].split('"')[0]: value
            for name, value in metrics_of(port).items()
            if name.startswith("switchyard_proxy_client_bytes_total{")}


def server_copies(metrics_port, workers):
    """Bytes the proxy and the workers have copied so far (their `*_bytes_copied_total`
    counters: their own copies and the kernel's for their socket reads and writes)."""
    # `switchyard up --metrics_port=P`: the proxy on P, worker i on P+2+i.
    return {"proxy": metrics_of(metrics_port)["switchyard_proxy_bytes_copied_total"],
            "workers": sum(metrics_of(metrics_port + 2 + i)["switchyard_worker_bytes_copied_total"]
                           for i in range(workers))}


def copies(cluster, metrics_port, workers, mib):
    """Copies per byte on each path, in the proxy and the workers: one transfer of `mib`
    MiB each way (bench/cases.py copies), the counters read between them."""
    process = subprocess.Popen([sys.executable, str(HERE / "cases.py"), "proxy", "copies",
                                "--sizes", str(mib)], env={**os.environ, **cluster.env()},
                               text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None
    out: dict[str, dict[str, float]] = {}
    before: dict[str, float] | None = None
    for line in process.stdout:
        if line.startswith("MARK "):
            now = server_copies(metrics_port, workers)
            if before is not None:
                out[line.split()[1]] = {k: (now[k] - before[k]) / (mib << 20) for k in now}
            before = now
            process.stdin.write("\n")
            process.stdin.flush()
    if process.wait(timeout=600) != 0 or len(out) != 3:
        raise RuntimeError(f"the copies case failed: {out}")
    print(f"copies per byte: {out}", flush=True)
    return {"mib": mib, "paths": out}


def _write_file(path, size):
    chunk = os.urandom(1 << 20)
    with open(path, "wb") as f:
        left = size
        while left > 0:
            left -= f.write(chunk[:min(left, len(chunk))])
        f.flush()
        os.fsync(f.fileno())


def _read_file(path, size):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def _read_file_fresh(path, size):
    """Read whole into memory mapped for it, as a restore must: the kernel clears each
    fresh page before the bytes land (a buffer read into again costs no such clearing)."""
    import mmap
    memory = mmap.mmap(-1, max(size, 1))
    with open(path, "rb", buffering=0) as f:
        view, done = memoryview(memory), 0
        while done < size:
            done += f.readinto(view[done:])
        view.release()
    memory.close()


def plain_files(directory, total_bytes, writers=2, files=8):
    """The baseline: the same bytes as `files` files written (write + fsync) and read
    back by `writers` processes, as a worker host's own file I/O would: into a buffer
    used again, and into new memory."""
    import concurrent.futures
    import functools
    import tempfile
    root = tempfile.mkdtemp(dir=directory)
    paths = [os.path.join(root, str(i)) for i in range(files)]
    timings = {}
    with concurrent.futures.ProcessPoolExecutor(writers) as pool:
        for name, fn in (("write_s", _write_file), ("read_s", _read_file),
                         ("read_fresh_s", _read_file_fresh)):
            started = time.perf_counter()
            list(pool.map(functools.partial(fn, size=total_bytes // files), paths))
            timings[name] = time.perf_counter() - started
    return timings


def checkpoint(sizes_mib):
    """Orbax saves and restores of a state made on the workers, by size: seconds, the
    bytes the proxy handled, and plain file I/O of the same bytes."""
    import tempfile
    results = []
    for mib in sizes_mib:
        port = switchyard.cluster.free_port()
        with tempfile.TemporaryDirectory() as directory, switchyard.LocalCluster(
                workers=2, devices_per_worker=4, flags=(f"--metrics_port={port}",)) as c:
            process = subprocess.Popen([sys.executable, str(HERE / "checkpoint_cases.py"),
                                        directory, str(mib)], env={**os.environ, **c.env()},
                                       text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            assert process.stdin is not None and process.stdout is not None
            before = proxy_client_bytes(port)
            line = process.stdout.readline()
            assert line.startswith("SAVED"), line
            after_save = proxy_client_bytes(port)
            process.stdin.write("\n")
            process.stdin.flush()
            out, _ = process.communicate(timeout=900)
            after_restore = proxy_client_bytes(port)
            result = json.loads(out.split("RESULT ", 1)[1].splitlines()[0])
            result["mib"] = mib
            result["proxy_bytes_save"] = sum(after_save.values()) - sum(before.values())
            result["proxy_bytes_restore"] = sum(after_restore.values()) - sum(after_save.values())
            result["plain"] = plain_files(directory, result["bytes"])
            results.append(result)
            print(f"checkpoint {mib} MiB: {result}", flush=True)
    return results


def colocated(sizes_mib):
    """Colocated Python: the client's bytes per step of a host-side loader, by batch size,
    and the sidecar's array hand-off against memcpy."""
    loader, handoff = [], []
    for mib in sizes_mib:
        port = switchyard.cluster.free_port()
        with switchyard.LocalCluster(workers=2, devices_per_worker=2,
                                     flags=(f"--metrics_port={port}",)) as c:
            steps = 10
            process = subprocess.Popen([sys.executable, str(HERE / "colocated_cases.py"),
                                        "loader", str(mib), str(steps)],
                                       env={**os.environ, **c.env()}, text=True,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            assert process.stdin is not None and process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("READY"), line
            before = proxy_client_bytes(port)
            process.stdin.write("\n")
            process.stdin.flush()
            out, _ = process.communicate(timeout=900)
            after = proxy_client_bytes(port)
            result = json.loads(out.split("RESULT ", 1)[1].splitlines()[0])
            result["mib"] = mib
            result["client_bytes_per_step"] = (sum(after.values()) - sum(before.values())) / steps
            loader.append(result)
            print(f"colocated loader {mib} MiB/host: {result}", flush=True)
            out = subprocess.run([sys.executable, str(HERE / "colocated_cases.py"), "handoff",
                                  str(mib), "5"], env={**os.environ, **c.env()}, text=True,
                                 capture_output=True, timeout=900).stdout
            result = json.loads(out.split("RESULT ", 1)[1].splitlines()[0])
            result["mib"] = mib
            handoff.append(result)
            print(f"colocated hand-off {mib} MiB: {result}", flush=True)
    return {"loader": loader, "handoff": handoff}


def transport(rounds):
    """A/B in one run, one binary, interleaved: a local cluster on private Unix sockets
    (the default) against the same cluster on TCP ports; and colocated Python's sidecars
    in their sandbox (the default) against unconfined."""
    setups: dict[str, dict[str, Any]] = {
        "tcp": dict(rm_port=0, proxy_port=0, flags=("--worker_port=0",)), "unix": {}}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in setups}
    for round_ in range(rounds):
        for name, kwargs in setups.items():
            with switchyard.LocalCluster(workers=2, devices_per_worker=PER_SLICE, **kwargs) as c:
                row = case("proxy", "latency", "--iters", 1000, env=c.env())
                row["bandwidth"] = case("proxy", "bandwidth", "--sizes", 16, 64, "--reps", 3,
                                        env=c.env())
            runs[name].append(row)
            print(f"transport {name}, round {round_ + 1}: {row}", flush=True)
    sidecars = {"sandboxed": (), "unconfined": ("--sidecar_sandbox=false",)}
    handoff: dict[str, list[dict[str, float]]] = {name: [] for name in sidecars}
    for round_ in range(rounds):
        for name, flags in sidecars.items():
            with switchyard.LocalCluster(workers=2, devices_per_worker=2, flags=flags) as c:
                out = subprocess.run([sys.executable, str(HERE / "colocated_cases.py"), "handoff",
                                      "16", "5"], env={**os.environ, **c.env()}, text=True,
                                     capture_output=True, timeout=900).stdout
            result = json.loads(out.split("RESULT ", 1)[1].splitlines()[0])
            handoff[name].append(result)
            print(f"sidecar {name}, round {round_ + 1}: {result}", flush=True)
    return {"runs": runs, "handoff": handoff}


RAW_SENDER = """
import socket, sys
family, where, mib = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = memoryview(bytearray(mib << 20))
if family == "unix":
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect(where)
else:
    s = socket.create_connection(("127.0.0.1", int(where)))
s.sendall(data)
s.close()
"""


def raw_stream(family, mib, reps):
    """MB/s of one raw stream socket between two processes on this host (sendall into
    recv_into a buffer allocated once): the ceiling a data plane over it can reach."""
    import socket
    best = 0.0
    into = memoryview(bytearray(mib << 20))
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(reps):
            if family == "unix":
                where = os.path.join(tmp, "raw.sock")
                server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                server.bind(where)
            else:
                server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                server.bind(("127.0.0.1", 0))
                where = str(server.getsockname()[1])
            server.listen(1)
            sender = subprocess.Popen([sys.executable, "-c", RAW_SENDER, family, where, str(mib)])
            conn, _ = server.accept()
            t = time.perf_counter()
            got = 0
            while got < len(into):
                n = conn.recv_into(into[got:])
                if n == 0:
                    break
                got += n
            best = max(best, mib * 1.048576 / (time.perf_counter() - t))
            conn.close()
            server.close()
            sender.wait(timeout=60)
            if family == "unix":
                os.unlink(where)
    return best


def data_plane(rounds, sizes=(16, 64, 256)):
    """A/B in one run, one binary, interleaved: buffers between workers, those the proxy
    reads for a client's fetch and those workers pull from it for an upload, on the bulk
    data plane (the default) against gRPC
    (`--bulk_transfers=false`), on private Unix sockets (the default) and on TCP; with
    raw stream sockets of the same host as the ceiling."""
    tcp = dict(rm_port=0, proxy_port=0)
    setups: dict[str, dict[str, Any]] = {
        "unix grpc": dict(flags=("--bulk_transfers=false",)), "unix bulk": {},
        "tcp grpc": dict(tcp, flags=("--worker_port=0", "--bulk_transfers=false")),
        "tcp bulk": dict(tcp, flags=("--worker_port=0",))}
    runs: dict[str, list[dict[str, dict[str, float]]]] = {name: [] for name in setups}
    raw: dict[str, list[float]] = {"unix": [], "tcp": []}
    for round_ in range(rounds):
        for family in raw:
            raw[family].append(raw_stream(family, max(sizes), 2))
        for name, kwargs in setups.items():
            with switchyard.LocalCluster(workers=2, devices_per_worker=PER_SLICE, **kwargs) as c:
                row = case("proxy", "bandwidth", "--sizes", *sizes, "--reps", 3, env=c.env())
            runs[name].append({m: {k: v[k] * 1.048576 for k in ("h2d", "d2h", "d2d")}
                               for m, v in row.items()})
            print(f"data plane {name}, round {round_ + 1}: {runs[name][-1]}", flush=True)
        print(f"raw streams, round {round_ + 1}: {raw['unix'][-1]:.0f} {raw['tcp'][-1]:.0f}",
              flush=True)
    return {"runs": runs, "raw": raw, "sizes": list(map(str, sizes))}


TUNIX_PYTHON = ROOT / ".venv-tunix" / "bin" / "python"


def rl(quick):
    """What an RL job through Switchyard pays (issue: the seed's workloads): the trainer's
    weights to the sampler's slice (`jax.device_put` and Tunix's `reshard_pytree`) against
    raw stream sockets and a raw gRPC stream of the same run, a sampler's small fetch
    against local JAX, and GRPO steps/s (examples/rl_grpo.py) against the same run on
    local JAX. Needs .venv-tunix (`./dev setup`)."""
    if not TUNIX_PYTHON.exists():
        raise SystemExit("the rl section needs the Tunix venv: run ./dev setup")
    mib = 64 if quick else 256
    raw = {family: raw_stream(family, mib, 2) for family in ("tcp", "unix")}
    grpc = json.loads(subprocess.run(
        [str(ROOT / "build" / "bench" / "grpc_stream_bench"), str(mib), "2"],
        capture_output=True, text=True, check=True).stdout)
    r: dict[str, Any] = {"mib": mib, "raw": raw,
                         "grpc": {k: v * 1.048576 for k, v in grpc.items()}}
    tunix = [str(TUNIX_PYTHON), str(HERE / "rl_cases.py")]
    with switchyard.LocalCluster(workers=2, devices_per_worker=PER_SLICE) as c:
        r["sync"] = run_case([*tunix, "sync", "--mib", str(mib), "--arrays", "1", "64", "256",
                              "--reps", "3"], env=c.env())
        r["fetch_proxy"] = run_case([*tunix, "fetch", "proxy"], env=c.env())
        steps = 3 if quick else 8
        grpo = subprocess.run([str(TUNIX_PYTHON), str(ROOT / "examples" / "rl_grpo.py"),
                               "--target", c.target, "--steps", str(steps)],
                              env={**os.environ, **c.env()}, capture_output=True, text=True,
                              timeout=1200)
        if grpo.returncode != 0:
            raise RuntimeError(f"rl_grpo.py failed:\n{grpo.stderr[-3000:]}")
    r["fetch_local"] = run_case([*tunix, "fetch", "local"])
    for line in grpo.stdout.splitlines():
        if line.startswith("steps/s:"):  # "steps/s: X through Switchyard, Y on local JAX"
            words = line.split()
            r["grpo"] = {"steps": steps, "proxy": float(words[1].rstrip(",")),
                         "local": float(words[4].rstrip(","))}
    return r


def render_rl(r):
    m = r["rl"]
    raw, grpc = m["raw"], m["grpc"]
    lines = [f"Trainer mesh on slice 0 to the sampler's on slice 1 (2 CPU devices each, Unix "
             f"sockets), {m['mib']} MiB of float32 in all, best of 3 (median in brackets). "
             f"Ceilings of the same run: raw Unix stream {raw['unix']:.0f} MB/s, raw TCP "
             f"{raw['tcp']:.0f} MB/s, one raw gRPC stream {grpc['upload_mib_s']:.0f} MB/s.\n",
             "| arrays | path | MB/s | x raw Unix | x raw TCP | x raw gRPC |",
             "|---|---|---|---|---|---|"]
    for arrays, row in m["sync"].items():
        for path, v in row.items():
            lines.append(f"| {arrays} | {path} | {v['best']:.0f} ({v['median']:.0f}) | "
                         f"{v['best'] / raw['unix']:.2f} | {v['best'] / raw['tcp']:.2f} | "
                         f"{v['best'] / grpc['upload_mib_s']:.2f} |")
    p, lo = m["fetch_proxy"], m["fetch_local"]
    lines += ["", "A sampler's fetch of 256 bytes (`jax.device_get`), ms:\n",
              "| fetch | Switchyard p50 | p99 | local JAX p50 | p99 |", "|---|---|---|---|---|"]
    for kind, label in (("ready", "of a computed array"), ("issued", "of a step just issued")):
        lines.append(f"| {label} | {p[kind + '_p50_ms']:.3f} | {p[kind + '_p99_ms']:.3f} | "
                     f"{lo[kind + '_p50_ms']:.3f} | {lo[kind + '_p99_ms']:.3f} |")
    if "grpo" in m:
        g = m["grpo"]
        lines += ["", f"GRPO (examples/rl_grpo.py, {g['steps']} steps, trainer and sampler on "
                  f"two slices): {g['proxy']:.3f} steps/s through Switchyard, {g['local']:.3f} "
                  f"on local JAX: {g['proxy'] / g['local']:.2f}x."]
    return "\n".join(lines) + "\n"


def median(values):
    return sorted(values)[len(values) // 2]


def render_data_plane(r):
    d = r["data_plane"]
    raw = {family: median(values) for family, values in d["raw"].items()}

    def rate(setup, mib, path):
        # Older results hold the worker-to-worker rate alone.
        return median([row[mib][path] if isinstance(row[mib], dict) else row[mib]
                       for row in d["runs"][setup]])

    lines = ["## Buffers between workers: the bulk data plane against gRPC\n",
             "`jax.device_put` of a uint8 array from a device of one worker to a device of "
             "another (best of 3 per round, median of "
             f"{len(d['raw']['unix'])} interleaved rounds), on a local cluster of 2 workers x "
             f"{PER_SLICE} CPU devices: the bytes on gRPC (`--bulk_transfers=false`) and on the "
             "bulk data plane (the default), with the cluster on private Unix sockets (the "
             "default) and on TCP. Raw: one stream socket of the same kind between two "
             f"processes, {d['sizes'][-1]} MiB sent into a buffer allocated once "
             f"(Unix {raw['unix']:.0f} MB/s, TCP {raw['tcp']:.0f} MB/s).\n",
             "| socket | MiB | gRPC MB/s | bulk MB/s | bulk / gRPC | gRPC / raw | bulk / raw |",
             "|---|---|---|---|---|---|---|"]
    for family in ("unix", "tcp"):
        for mib in d["sizes"]:
            g, b = rate(f"{family} grpc", mib, "d2d"), rate(f"{family} bulk", mib, "d2d")
            lines.append(f"| {family} | {mib} | {g:.0f} | {b:.0f} | {b / g:.2f}x | "
                         f"{g / raw[family]:.2f}x | {b / raw[family]:.2f}x |")
    if isinstance(d["runs"]["unix bulk"][0][d["sizes"][0]], dict):
        lines += ["\nThe same runs, through the proxy: `np.asarray` of an array on a worker "
                  "(the proxy reads it from the worker, on the data plane or over gRPC, and "
                  "streams it on to the client over gRPC) and `jax.device_put` of NumPy data "
                  "(the client uploads to the proxy over gRPC; the worker pulls it from the "
                  "proxy's data plane as it arrives, or the proxy sends it over gRPC).\n",
                  "| socket | MiB | fetch gRPC | fetch bulk | bulk / gRPC | upload gRPC | "
                  "upload bulk | bulk / gRPC |", "|---|---|---|---|---|---|---|---|"]
        for family in ("unix", "tcp"):
            for mib in d["sizes"]:
                g, b = rate(f"{family} grpc", mib, "d2h"), rate(f"{family} bulk", mib, "d2h")
                ug, ub = rate(f"{family} grpc", mib, "h2d"), rate(f"{family} bulk", mib, "h2d")
                lines.append(f"| {family} | {mib} | {g:.0f} | {b:.0f} | {b / g:.2f}x | "
                             f"{ug:.0f} | {ub:.0f} | {ub / ug:.2f}x |")
    return "\n".join(lines) + "\n"


def render_transport(r):
    t = r["transport"]

    def of(name, pick):
        return median([pick(row) for row in t["runs"][name]])

    def bandwidth(mib: str, key: str) -> Callable[[dict[str, Any]], float]:
        return lambda x: x["bandwidth"][mib][key] * 1.048576

    metrics: list[tuple[str, str, Callable[[dict[str, Any]], float], bool]] = [
        ("synchronous call p50", "µs", lambda x: x["sync_p50_us"], False),
        ("synchronous call p99", "µs", lambda x: x["sync_p99_us"], False),
        ("pipelined call", "µs", lambda x: x["pipelined_per_call_us"], False)]
    for mib in ("16", "64"):
        for key, what in (("h2d", "host → worker"), ("d2h", "worker → host"),
                          ("d2d", "worker → worker")):
            metrics.append((f"{what}, {mib} MiB", "MB/s", bandwidth(mib, key), True))
    lines = ["## Private Unix sockets (the default) against TCP\n",
             "The same binary, a local cluster of 2 workers x 2 CPU devices started both ways "
             f"({len(t['runs']['unix'])} rounds, interleaved; medians): `switchyard up` as it "
             "is (every process on a Unix socket in a private directory, each connection's "
             "peer checked) and with `--rm_port`, `--proxy_port`, `--worker_port` (TCP on "
             "127.0.0.1). Ratio: Unix over TCP (above 1 is better for rates, below 1 for times).\n",
             "| metric | TCP | Unix sockets | ratio |", "|---|---|---|---|"]
    for name, unit, pick, _rate in metrics:
        tcp, unix = of("tcp", pick), of("unix", pick)
        lines.append(f"| {name} | {tcp:.0f} {unit} | {unix:.0f} {unit} | {unix / tcp:.2f}x |")
    h = t["handoff"]
    first = {name: median([x["first_call_s"] for x in h[name]]) for name in h}
    call = {name: median([x["handoff_s"] for x in h[name]]) for name in h}
    lines += ["", "## Colocated Python in its sandbox against unconfined\n",
              "An identity colocated function on a 16 MiB array on one device: the first call "
              "(which starts the sidecar: namespaces, mounts, its init, Python and jax) and the "
              "next calls (medians of rounds). Ratio: sandboxed over unconfined.\n",
              "| | unconfined | sandboxed | ratio |", "|---|---|---|---|",
              f"| first call (sidecar start) | {first['unconfined']:.2f} s | "
              f"{first['sandboxed']:.2f} s | {first['sandboxed'] / first['unconfined']:.2f}x |",
              f"| a call after | {call['unconfined'] * 1e3:.1f} ms | "
              f"{call['sandboxed'] * 1e3:.1f} ms | {call['sandboxed'] / call['unconfined']:.2f}x |"]
    return "\n".join(lines) + "\n"


def render_colocated(r):
    c = r["colocated"]
    lines = ["## A loader on the hosts (colocated Python)\n",
             "A `colocated_python_class` on each of 2 worker hosts (2 CPU devices each) makes "
             "its host's part of each batch; a jitted step reduces the batch where it is. "
             "Client bytes: what passed between the client and the proxy per step (the "
             "proxy's counter), against the batch's size.\n",
             "| batch per host | batch bytes | client bytes per step | steps/s |",
             "|---|---|---|---|"]
    for x in c["loader"]:
        lines.append(f"| {x['mib']} MiB | {x['batch_bytes'] / 1e6:.1f} MB | "
                     f"{x['client_bytes_per_step'] / 1e3:.1f} kB | "
                     f"{x['steps'] / x['seconds']:.1f} |")
    lines += ["", "## Array hand-off between a worker and its sidecar\n",
              "An identity colocated function on one array on one device (declared output "
              "specs): the worker copies the shard into a shared-memory file, the sidecar "
              "copies it into a JAX array and the result into another file, whose pages become "
              "the device buffer. Against numpy copying the same bytes once (memcpy) in the "
              "client.\n",
              "| array | call s | MB/s | memcpy MB/s | ratio |", "|---|---|---|---|---|"]
    for x in c["handoff"]:
        mb = x["bytes"] / 1e6
        lines.append(f"| {x['mib']} MiB | {x['handoff_s']:.4f} | {mb / x['handoff_s']:.0f} | "
                     f"{mb / x['memcpy_s']:.0f} | {x['memcpy_s'] / x['handoff_s']:.3f}x |")
    return "\n".join(lines) + "\n"


def render_checkpoint(r):
    lines = ["## Checkpoints written and read by the workers (Orbax, persistence API)\n",
             "A state of f32 arrays made on the workers (2 slices x 4 devices, half on each), "
             "saved with Orbax's `StandardCheckpointer` under `ENABLE_PATHWAYS_PERSISTENCE=1` and "
             "restored onto the same shardings, against writing the same bytes as 8 files with "
             "plain file I/O (write + fsync, 2 processes: one per worker host) and reading them "
             "back, into a buffer used again and into new memory (as a restore must: the kernel "
             "clears each fresh page first). Proxy bytes: what passed between the client and "
             "the proxy during each.\n",
             "| state | save s | MB/s | plain write MB/s | ratio | restore s | MB/s | plain read "
             "MB/s | ratio | plain read into new memory MB/s | ratio | proxy bytes, save | "
             "proxy bytes, restore |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in r["checkpoint"]:
        mb = c["bytes"] / 1e6
        w, rd = mb / c["save_s"], mb / c["restore_s"]
        pw, pr = mb / c["plain"]["write_s"], mb / c["plain"]["read_s"]
        fresh = mb / c["plain"]["read_fresh_s"] if "read_fresh_s" in c["plain"] else None
        fresh_cells = f"{fresh:.0f} | {rd / fresh:.2f}x" if fresh else "– | –"
        lines.append(f"| {c['mib']} MiB | {c['save_s']:.2f} | {w:.0f} | {pw:.0f} | {w / pw:.2f}x | "
                     f"{c['restore_s']:.2f} | {rd:.0f} | {pr:.0f} | {rd / pr:.2f}x | "
                     f"{fresh_cells} | {c['proxy_bytes_save'] / 1e3:.0f} kB | "
                     f"{c['proxy_bytes_restore'] / 1e3:.0f} kB |")
    return "\n".join(lines) + "\n"


def render_compile_cache(r):
    c = r["compile_cache"]

    def row(name, cold, warm):
        return (f"| {name} | {cold['compile_s']:.3f} | {warm['compile_s']:.3f} | "
                f"{cold['compile_s'] / warm['compile_s']:.1f}x | "
                f"{cold['lower_s'] + cold['compile_s']:.3f} | "
                f"{warm['lower_s'] + warm['compile_s']:.3f} |")

    lines = ["## Compilation cache (seconds; each row's runs are new client processes)\n",
             "The compile step is `.compile()` of `jax.jit(f).lower(x)`; with tracing and "
             "lowering, which every client process does, it is the whole `lower().compile()`.\n",
             "| system | compile step, cold | from cache | cold / from cache | with tracing, cold "
             "| from cache |", "|---|---|---|---|---|---|",
             row("JAX in-process CPU, its own persistent cache", c["local_cold"], c["local_warm"]),
             row("Switchyard, a second client", c["switchyard_cold"], c["switchyard_warm"]),
             row("Switchyard, after a restart with 1 worker instead of 2", c["switchyard_cold"],
                 c["switchyard_restarted"]), ""]
    return "\n".join(lines) + "\n"


def elasticity():
    """Times from kill -9 of one of 3 slices to the first good step on 2, and back on 3,
    from examples/elastic_train.py; the baseline is its own step time before the kill."""
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "elastic_train.py"), "--kill-at",
                          "12", "--steps", "60", "--step-sleep", "0.05"], capture_output=True,
                         text=True, timeout=600).stdout
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    killed = next(line for line in lines if "killed_slice" in line)
    steps = [line for line in lines if "step" in line]
    before = [s for s in steps if s["time"] <= killed["time"]]
    step_s = (before[-1]["time"] - before[1]["time"]) / (len(before) - 2)
    after = [s for s in steps if s["time"] > killed["time"]]
    down = next(s for s in after if s["slices"] == 2)
    back = next(s for s in after if s["slices"] == 3 and s["time"] > down["time"])
    return {"step_s": step_s, "to_n_minus_1_s": down["time"] - killed["time"],
            "to_n_s": back["time"] - killed["time"],
            "steps_redone": killed["after_step"] - down["step"] + 1}


def fmt(v, digits=0):
    return f"{v:,.{digits}f}"


def crossover_ms(r, workers):
    """Smallest duration at which Switchyard on `workers` slices reaches 95% of local
    throughput on as many."""
    ours, local = r["switchyard_crossover"][workers], r["local_crossover"][workers]
    for k, d in sorted(r["durations_s"].items(), key=lambda kv: kv[1]):
        if ours[k] >= 0.95 * local[k]:
            return d * 1e3
    return None


def render(r):
    lines = ["# Switchyard benchmarks\n", f"Machine: {r['machine']}. Run: {r['date']}, "
             f"{r['elapsed_s']:.0f} s. Ratios compare systems measured in this same run.\n"]
    lines += ["## 1. Pathways micro-benchmark (computations/s; one computation = all-reduce of a "
              f"slice's {PER_SLICE} scalars + add)\n",
              "| system | OpByOp | Chained (128) | Fused (128) |", "|---|---|---|---|"]
    for s in (1, 2, 4):
        m = r["local_micro"][s]
        lines.append(f"| JAX in-process CPU, {s} slice(s) | {fmt(m['opbyop'])} | "
                     f"{fmt(m['chained'])} | {fmt(m['fused'])} |")
    for w, m in r["switchyard_micro"].items():
        lines.append(f"| Switchyard, {w} worker(s) | {fmt(m['opbyop'])} | {fmt(m['chained'])} | "
                     f"{fmt(m['fused'])} |")
    ray = r["ray"]
    if "error" not in ray:
        lines.append(f"| Ray Core (actor call) | {fmt(ray['core_opbyop'])} | "
                     f"{fmt(ray['core_chained'])} | {fmt(ray['core_fused'])} |")
        lines.append(f"| Ray Compiled Graphs | {fmt(ray['cg_opbyop'])} | "
                     f"{fmt(ray['cg_chained'])} | – |")
    else:
        lines.append(f"| Ray | not measured: {ray['error']} | | |")
    if "compile_cache" in r:
        lines += ["", render_compile_cache(r)]
    sy1, local1 = r["switchyard_micro"][1], r["local_micro"][1]
    lat_sy, lat_local = r["switchyard_latency"], r["local_latency"]
    lines += ["", "## Targets\n", "| target | measured | goal | met |", "|---|---|---|---|"]

    def target(name, value, goal, ok):
        lines.append(f"| {name} | {value} | {goal} | {'yes' if ok else 'no'} |")
    if "sync_server_cpu_us" in lat_sy:
        server = sum(lat_sy["sync_server_cpu_us"].values())
        target("Server CPU per synchronous tiny call (proxy + workers)", f"{server:.0f} us",
               "<= 60 us", server <= 60)
    overhead = lat_sy["sync_p50_us"] - lat_local["sync_p50_us"]
    target("Synchronous call overhead over local JAX (p50)", f"{overhead:.0f} us", "<= 150 us",
           overhead <= 150)
    pipelined = lat_sy["pipelined_per_call_us"]
    target("Pipelined call", f"{pipelined:.0f} us", "<= 25 us", pipelined <= 25)
    if "error" not in ray:
        cg = sy1["chained"] / ray["cg_chained"]
        core = sy1["chained"] / ray["core_chained"]
        target("Chained vs Ray Compiled Graphs", f"{cg:.2f}x", ">= 0.5x", cg >= 0.5)
        target("Chained vs Ray Core", f"{core:.1f}x", ">= 10x", core >= 10)
    big = max(r["switchyard_bandwidth"], key=int)
    bw, raw = r["switchyard_bandwidth"][big], r["grpc"][big]
    if "raw_stream" in r:
        # The yardstick: 256 MiB against one raw loopback TCP stream (MB/s).
        at = "256" if "256" in r["switchyard_bandwidth"] else big
        value = r["switchyard_bandwidth"][at]["d2d"] * 1.048576 / r["raw_stream"]["tcp"]
        target(f"worker -> worker bandwidth vs a raw loopback TCP stream ({at} MiB)",
               f"{value:.2f}x", ">= 0.7x", value >= 0.7)
    for name, value, goal in (("host -> worker", bw["h2d"] / raw["upload_mib_s"], 0.8),
                              ("worker -> worker", bw["d2d"] / raw["upload_mib_s"], 1.5),
                              ("worker -> host", bw["d2h"] / raw["download_mib_s"], 0.8)):
        target(f"{name} bandwidth vs raw gRPC ({big} MiB)", f"{value:.2f}x", f">= {goal}x",
               value >= goal)
    if "disk_h2d" in bw:
        value = bw["disk_h2d"] / bw["memcpy"]
        target(f"host -> worker through the shared directory vs memcpy ({big} MiB)",
               f"{value:.2f}x", ">= 0.5x", value >= 0.5)
    if r.get("colocated"):
        h = r["colocated"]["handoff"][-1]
        value = h["memcpy_s"] / h["handoff_s"]
        target(f"Colocated hand-off vs memcpy ({h['mib']} MiB)", f"{value:.2f}x", ">= 0.5x",
               value >= 0.5)
    if r.get("checkpoint"):
        c = r["checkpoint"][-1]
        value = c["plain"]["read_s"] / c["restore_s"]
        target(f"Checkpoint restore vs plain file reads into a buffer used again ({c['mib']} MiB)",
               f"{value:.2f}x", ">= 0.8x", value >= 0.8)
        if "read_fresh_s" in c["plain"]:
            value = c["plain"]["read_fresh_s"] / c["restore_s"]
            target(f"Checkpoint restore vs plain file reads into new memory ({c['mib']} MiB)",
                   f"{value:.2f}x", ">= 0.8x", value >= 0.8)
    if r.get("copies"):
        for path, name in (("d2d", "worker -> worker"), ("h2d", "host -> worker"),
                           ("d2h", "worker -> host")):
            v = r["copies"]["paths"][path]
            total = v["proxy"] + v["workers"]
            target(f"Copies per byte, {name}, in the proxy and workers ({r['copies']['mib']} MiB)",
                   f"{total:.1f}", "<= 2", total <= 2.05)
    fused = sy1["fused"] / local1["fused"]
    target("Fused vs local JAX", f"{fused:.2f}x", ">= 0.95x", fused >= 0.95)
    for workers in sorted(r["switchyard_crossover"], key=int):
        cross = crossover_ms(r, workers)
        ratios = {k: r["switchyard_crossover"][workers][k] / r["local_crossover"][workers][k]
                  for k in r["durations_s"]}
        best = max(ratios, key=lambda k: ratios[k])
        value = f"{cross:.2f} ms" if cross is not None else (
            f"not within the sizes run (best {ratios[best]:.2f}x at "
            f"{r['durations_s'][best] * 1e3:.1f} ms)")
        target(f"Crossover compute size (95% of local), {workers} worker(s)", value, "reported",
               True)
    several = {str(n): v for n, v in r["multiclient"].items()}
    four = several["4"] / several["1"]
    target("Programs/s, 4 clients of one device vs 1 client alone", f"{four:.2f}x", ">= 1.3x",
           four >= 1.3)
    if "16" in several:
        sixteen = several["16"] / several["4"]
        target("Programs/s, 16 clients vs 4", f"{sixteen:.2f}x", ">= 1.0x", sixteen >= 1.0)
    if r.get("elastic"):
        worst = max(e["to_n_minus_1_s"] for e in r["elastic"])
        target("kill -9 of a slice to the first good step on N-1 (worst run)", f"{worst:.2f} s",
               "<= 5 s", worst <= 5)

    counts = sorted(r["switchyard_crossover"], key=int)
    lines += ["", "## 2. Crossover: chained throughput vs compute size (ratio to local JAX on as "
              "many slices)\n",
              "| compute (ms) | " + " | ".join(f"local {w} (/s) | Switchyard {w} (/s) | ratio"
                                           for w in counts) + " |",
              "|---|" + "---|---|---|" * len(counts)]
    for k, d in sorted(r["durations_s"].items(), key=lambda kv: kv[1]):
        cells = []
        for w in counts:
            a, b = r["local_crossover"][w][k], r["switchyard_crossover"][w][k]
            cells.append(f"{fmt(a)} | {fmt(b)} | {b / a:.2f}")
        lines.append(f"| {d * 1e3:.3f} | " + " | ".join(cells) + " |")
    lines += ["", "## 3. Dispatch latency of a tiny program (us)\n",
              "| system | sync p50 | sync p99 | issue p50 | issue p99 | pipelined per call |",
              "|---|---|---|---|---|---|"]
    for name, v in (("JAX in-process CPU", lat_local), ("Switchyard", lat_sy)):
        lines.append(f"| {name} | {v['sync_p50_us']:.0f} | {v['sync_p99_us']:.0f} | "
                     f"{v['issue_p50_us']:.0f} | {v['issue_p99_us']:.0f} | "
                     f"{v['pipelined_per_call_us']:.0f} |")
    if "sync_server_cpu_us" in lat_sy:
        cpu = lat_sy["sync_server_cpu_us"]
        total = lat_sy["sync_client_cpu_us"] + sum(cpu.values())
        lines += ["", "Where a call's time goes (CPU per call, by process, 2 workers):\n",
                  "| call | wall | client (jaxlib) | proxy | workers | all CPU |",
                  "|---|---|---|---|---|---|",
                  f"| synchronous | {lat_sy['sync_wall_us']:.0f} | "
                  f"{lat_sy['sync_client_cpu_us']:.0f} | {cpu.get('proxy', 0):.0f} | "
                  f"{cpu.get('worker', 0):.0f} | {total:.0f} |"]
        if "pipelined_server_cpu_us" in lat_sy:
            piped = lat_sy["pipelined_server_cpu_us"]
            total = lat_sy["pipelined_client_cpu_us"] + sum(piped.values())
            lines.append(f"| pipelined | {lat_sy['pipelined_per_call_us']:.0f} | "
                         f"{lat_sy['pipelined_client_cpu_us']:.0f} | {piped.get('proxy', 0):.0f} | "
                         f"{piped.get('worker', 0):.0f} | {total:.0f} |")
    if "sync_threads" in lat_sy:
        busy = sorted(((name, v) for name, v in lat_sy["sync_threads"].items()
                       if v["cpu_us"] >= 1 or v["switches"] >= 0.1),
                      key=lambda kv: -kv[1]["switches"])
        lines += ["", "The servers' threads per synchronous call (CPU and context switches; the "
                  "kernel's scheduling is most of the servers' CPU on this machine):\n",
                  "| process thread | CPU (us) | context switches |", "|---|---|---|"]
        lines += [f"| {name} | {v['cpu_us']:.0f} | {v['switches']:.1f} |" for name, v in busy]
    if "grpc_pingpong" in r:
        lines += ["", "The floor: one small message each way on a gRPC stream, client and server "
                  "in one process (bench/grpc_pingpong_bench.cc), by the server's API:\n",
                  "| server | round trip (us) | CPU per round trip (us) | context switches |",
                  "|---|---|---|---|"]
        for name, v in r["grpc_pingpong"].items():
            if "error" not in v:
                lines.append(f"| {name.replace('_', ' ')} | {v['round_trip_us']:.0f} | "
                             f"{v['cpu_us']:.0f} | {v['switches']:.1f} |")
    lines += ["", "## 4. Transfer bandwidth (MiB/s, best of the repetitions)\n",
              "| size (MiB) | memcpy | raw gRPC up | raw gRPC down | host -> worker | "
              "host -> worker (shared directory) | worker -> host | "
              "worker -> worker (other slice) |",
              "|---|---|---|---|---|---|---|---|"]
    for m, v in r["switchyard_bandwidth"].items():
        g = r["grpc"][m]
        lines.append(f"| {m} | {fmt(v['memcpy'])} | {fmt(g['upload_mib_s'])} | "
                     f"{fmt(g['download_mib_s'])} | {fmt(v['h2d'])} | "
                     f"{fmt(v.get('disk_h2d', 0))} | {fmt(v['d2h'])} | {fmt(v['d2d'])} |")
    if r.get("raw_stream"):
        lines += ["", f"Raw stream sockets between two processes (256 MiB into a buffer allocated "
                  f"once): TCP {r['raw_stream']['tcp']:.0f} MB/s, Unix "
                  f"{r['raw_stream']['unix']:.0f} MB/s."]
    if r.get("copies"):
        lines += ["", f"Copies per byte of one {r['copies']['mib']} MiB transfer each way, by "
                  "the proxy and the workers (their `*_bytes_copied_total` counters: memcpy, "
                  "protobuf's parse and serialization, PJRT's reads to host memory, and the "
                  "kernel's copy of what they send and receive on sockets; the client's own, "
                  "jaxlib's, not counted).\n",
                  "| path | proxy | workers | total |", "|---|---|---|---|"]
        for path, name in (("d2d", "worker -> worker"), ("h2d", "host -> worker"),
                           ("d2h", "worker -> host")):
            v = r["copies"]["paths"][path]
            lines.append(f"| {name} | {v['proxy']:.2f} | {v['workers']:.2f} | "
                         f"{v['proxy'] + v['workers']:.2f} |")
    lines += ["", "## 5. " + render_several_clients(
        {int(n) if str(n).isdigit() else n: v for n, v in r["multiclient"].items()}).lstrip("# ")]
    if r.get("elastic"):
        lines += ["",
                  "## 6. Elasticity: kill -9 of one of 3 slices' worker under elastic training\n",
                  "examples/elastic_train.py (pathwaysutils.elastic Manager, host-memory snapshots "
                  "every 5 steps, `switchyard up` restarting the worker). Times from the kill.\n",
                  "| run | step time (baseline) | first good step on 2 slices | back on 3 slices | "
                  "steps redone |", "|---|---|---|---|---|"]
        for i, e in enumerate(r["elastic"], 1):
            lines.append(f"| {i} | {e['step_s'] * 1e3:.0f} ms | {e['to_n_minus_1_s']:.2f} s "
                         f"({e['to_n_minus_1_s'] / e['step_s']:.0f} steps) | {e['to_n_s']:.2f} s | "
                         f"{e['steps_redone']} |")
    if r.get("colocated"):
        lines += ["", render_colocated(r).replace("## ", "## 7. ", 1)]
    if r.get("checkpoint"):
        lines += ["", render_checkpoint(r).replace("## ", "## 8. ", 1)]
    return "\n".join(lines) + "\n"


def plot(r, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    modes = ["opbyop", "chained", "fused"]
    systems = [("local JAX", r["local_micro"][1])] + [
        (f"Switchyard {w}w", m) for w, m in r["switchyard_micro"].items()]
    if "error" not in r["ray"]:
        systems.append(("Ray Core", {m: r["ray"][f"core_{m}"] for m in modes}))
        systems.append(("Ray CG", {"opbyop": r["ray"]["cg_opbyop"],
                                   "chained": r["ray"]["cg_chained"], "fused": 0}))
    width = 0.8 / len(systems)
    for i, (name, m) in enumerate(systems):
        ax[0].bar([j + i * width for j in range(3)], [m[k] for k in modes], width, label=name)
    ax[0].set_xticks([j + 0.4 - width / 2 for j in range(3)], modes)
    ax[0].set_yscale("log")
    ax[0].set_ylabel("computations / s")
    ax[0].set_title("Pathways micro-benchmark")
    ax[0].legend(fontsize=7)
    ks = sorted(r["durations_s"], key=lambda k: r["durations_s"][k])
    xs = [r["durations_s"][k] * 1e3 for k in ks]
    for w in sorted(r["switchyard_crossover"], key=int):
        ax[1].plot(xs, [r["switchyard_crossover"][w][k] / r["local_crossover"][w][k] for k in ks],
                   "o-", label=f"{w} worker(s)")
    ax[1].legend(fontsize=7)
    ax[1].axhline(0.95, color="gray", linestyle="--")
    ax[1].set_xscale("log")
    ax[1].set_xlabel("compute per program (ms)")
    ax[1].set_ylabel("Switchyard / local throughput")
    ax[1].set_title("Crossover")
    fig.tight_layout()
    fig.savefig(out / "latest.png", dpi=100)


if __name__ == "__main__":
    main()
