"""Benchmark cases, run inside one client process per system (see run.py).

    python cases.py SYSTEM CASE [--key value ...]     prints one JSON object

SYSTEM is `local` (JAX's in-process CPU backend, the multi-controller stand-in) or
`proxy` (a Switchyard cluster at $JAX_BACKEND_TARGET).
"""

import argparse
import json
import os
import sys
import time

import numpy as np

CHAIN = 128


def setup(system, local_devices):
    if system == "local":
        os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={local_devices}"
        os.environ["JAX_PLATFORMS"] = "cpu"
        import jax
        return jax
    import jax

    import switchyard
    switchyard.initialize()
    return jax


def slice_meshes(jax, slices, per_slice):
    from jax.sharding import Mesh
    devices = jax.devices()
    if hasattr(devices[0], "slice_index"):
        by_slice: dict[int, list] = {}
        for d in devices:
            by_slice.setdefault(d.slice_index, []).append(d)
        groups = [by_slice[k][:per_slice] for k in sorted(by_slice)][:slices]
    else:
        groups = [devices[i * per_slice:(i + 1) * per_slice] for i in range(slices)]
    return [Mesh(np.array(g), ("d",)) for g in groups]


def micro(jax, args):
    """Pathways Figure 5: a scalar all-reduce over a slice plus an add, feeding the next."""
    from jax.sharding import NamedSharding, PartitionSpec as P
    meshes = slice_meshes(jax, args.slices, args.per_slice)
    steps, fused, xs = [], [], []
    for mesh in meshes:
        n = len(mesh.devices.flat)
        one = jax.shard_map(lambda v, n=n: jax.lax.psum(v, "d") / n + 1.0, mesh=mesh,
                            in_specs=P("d"), out_specs=P("d"))
        steps.append(jax.jit(one))

        def chain(v, one=one):
            for _ in range(CHAIN):
                v = one(v)
            return v
        fused.append(jax.jit(chain))
        xs.append(jax.device_put(np.zeros(n, np.float32), NamedSharding(mesh, P("d"))))
    for s, f, x in zip(steps, fused, xs):  # compile
        jax.block_until_ready((s(x), f(x)))
    state = {"xs": xs}

    def opbyop():  # one call per computation; the client waits for each
        for _ in range(args.iters):
            state["xs"] = [s(x) for s, x in zip(steps, state["xs"])]
            jax.block_until_ready(state["xs"])
        return args.iters * len(steps)

    def chained():  # 128 dependent calls without waiting, then one wait
        for _ in range(args.reps):
            for _ in range(CHAIN):
                state["xs"] = [s(x) for s, x in zip(steps, state["xs"])]
            jax.block_until_ready(state["xs"])
        return args.reps * CHAIN * len(steps)

    def fused_chain():  # the chain of 128 in one program
        for _ in range(args.reps):
            state["xs"] = [f(x) for f, x in zip(fused, state["xs"])]
            jax.block_until_ready(state["xs"])
        return args.reps * CHAIN * len(steps)

    return {name: best_rate(fn) for name, fn in
            (("opbyop", opbyop), ("chained", chained), ("fused", fused_chain))}


def best_rate(fn, tries=3):
    """Best of a few runs: on two shared cores, the slowest runs measure the neighbours."""
    best = 0.0
    for _ in range(tries):
        t = time.perf_counter()
        n = fn()
        best = max(best, n / (time.perf_counter() - t))
    return best


def cpu_seconds():
    import resource
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def latency(jax, args):
    """Round trip of a tiny program on one device: each call waited for, and pipelined.
    Also this client's CPU time per synchronous call (see run.py for the servers')."""
    f = jax.jit(lambda v: v + 1)
    x = jax.device_put(np.float32(0), jax.devices()[0])
    f(x).block_until_ready()
    if args.signal_sync:
        print("SYNC", flush=True)  # the runner samples the servers' CPU from here
        sys.stdin.readline()
    samples = []
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    for _ in range(args.iters):
        t = time.perf_counter()
        x = f(x)
        x.block_until_ready()
        samples.append(time.perf_counter() - t)
    sync_cpu_us = (cpu_seconds() - cpu0) / args.iters * 1e6
    sync_wall_us = (time.perf_counter() - t0) / args.iters * 1e6
    if args.signal_sync:
        print("SYNC DONE", flush=True)
        sys.stdin.readline()
    issue = []
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    for _ in range(args.iters):
        t = time.perf_counter()
        x = f(x)
        issue.append(time.perf_counter() - t)
    x.block_until_ready()
    total = time.perf_counter() - t0
    pipelined_cpu_us = (cpu_seconds() - cpu0) / args.iters * 1e6
    if args.signal_sync:
        print("PIPELINED DONE", flush=True)
        sys.stdin.readline()
    def us(v):
        return float(v) * 1e6

    return {"sync_p50_us": us(np.percentile(samples, 50)),
            "sync_p99_us": us(np.percentile(samples, 99)),
            "issue_p50_us": us(np.percentile(issue, 50)),
            "issue_p99_us": us(np.percentile(issue, 99)),
            "pipelined_per_call_us": us(total / args.iters),
            "sync_client_cpu_us": sync_cpu_us, "sync_wall_us": sync_wall_us,
            "pipelined_client_cpu_us": pipelined_cpu_us}


def other_slice(devices, src):
    """A device of another slice than `src`'s, or the last device when there is one slice."""
    home = getattr(src, "slice_index", 0)
    return next((d for d in devices if getattr(d, "slice_index", 0) != home), devices[-1])


def bandwidth(jax, args):
    """host -> device (device_put), device -> host (fetch), device -> device (other slice)."""
    devices = jax.devices()
    src = devices[0]
    dst = other_slice(devices, src)
    out = {}
    for mib in args.sizes:
        a = np.random.default_rng(0).integers(0, 255, size=mib << 20, dtype=np.uint8)
        rows = {}
        best = {"h2d": 0, "d2h": 0, "d2d": 0}
        for _ in range(args.reps):
            t = time.perf_counter()
            x = jax.device_put(a, src)
            x.block_until_ready()
            best["h2d"] = max(best["h2d"], mib / (time.perf_counter() - t))
            if args.h2d_only:
                del x
                continue
            t = time.perf_counter()
            np.asarray(x)
            best["d2h"] = max(best["d2h"], mib / (time.perf_counter() - t))
            t = time.perf_counter()
            y = jax.device_put(x, dst)
            y.block_until_ready()
            best["d2d"] = max(best["d2d"], mib / (time.perf_counter() - t))
            del x, y
        rows["memcpy"] = 0.0
        for _ in range(args.reps):  # best of the repetitions, as the transfers
            t = time.perf_counter()
            a.copy()
            rows["memcpy"] = max(rows["memcpy"], mib / (time.perf_counter() - t))
        rows.update(best)
        out[str(mib)] = rows
    return out


def copies(jax, args):
    """One transfer of each path, each followed by a MARK line and a wait for a line on
    stdin, so the bench reads the servers' copy counters between them."""
    devices = jax.devices()
    src = devices[0]
    dst = other_slice(devices, src)
    mib = args.sizes[0]
    a = np.random.default_rng(0).integers(0, 255, size=mib << 20, dtype=np.uint8)

    def mark(name):
        print(f"MARK {name}", flush=True)
        sys.stdin.readline()
    jax.device_put(np.zeros(4), src).block_until_ready()  # the session's set-up, uncounted
    mark("start")
    x = jax.device_put(a, src)
    x.block_until_ready()
    mark("h2d")
    assert np.asarray(x)[-1] == a[-1]
    mark("d2h")
    jax.device_put(x, dst).block_until_ready()
    mark("d2d")
    return {"bytes": a.nbytes}


def work_fn(jax, k):
    """A program whose duration grows with k: k dependent 64x64 matmuls."""
    import jax.numpy as jnp
    def f(x):
        return jax.lax.fori_loop(0, k, lambda i, v: jnp.tanh(v @ v) * 0.5, x)
    return jax.jit(f)


def crossover(jax, args):
    """Chained throughput of programs of growing duration, on each slice at once."""
    devices = [m.devices.flat[0] for m in slice_meshes(jax, args.slices, 1)]
    out = {}
    for k in args.ks:
        f = work_fn(jax, k)
        xs = [jax.device_put(np.eye(64, dtype=np.float32) * 0.1, d) for d in devices]
        jax.block_until_ready([f(x) for x in xs])
        n = max(4, min(200, int(args.budget_s / max(args.durations_s[str(k)], 1e-5))))
        t = time.perf_counter()
        for _ in range(n):
            xs = [f(x) for x in xs]
        jax.block_until_ready(xs)
        out[str(k)] = n * len(xs) / (time.perf_counter() - t)
    return out


def calibrate(jax, args):
    """Duration of each work size on one local device (the compute-size axis)."""
    x = jax.device_put(np.eye(64, dtype=np.float32) * 0.1, jax.devices()[0])
    out = {}
    for k in args.ks:
        f = work_fn(jax, k)
        f(x).block_until_ready()
        n = 5
        while True:
            t = time.perf_counter()
            y = x
            for _ in range(n):
                y = f(y)
            y.block_until_ready()
            dt = (time.perf_counter() - t) / n
            if dt * n > 0.2 or n >= 5000:
                break
            n *= 4
        out[str(k)] = dt
    return out


def client_load(jax, args):
    """One of several clients: chained programs on one device (`--device`, or -1: a
    chain on each device) for a fixed time."""
    f = work_fn(jax, args.ks[0])
    devices = jax.devices() if args.device < 0 else [jax.devices()[args.device]]
    xs = [jax.device_put(np.eye(64, dtype=np.float32) * 0.1, d) for d in devices]
    for x in xs:
        f(x).block_until_ready()
    print("READY", flush=True)
    sys.stdin.readline()  # start together
    # Counted over `--seconds`; with `--tail`, the load goes on that much longer, so the
    # others are still loaded when the last of them stops counting.
    # With `--tail`, a round is issued before the last one is waited for, so the
    # devices always have this client's programs queued.
    done, t, last = 0, time.perf_counter(), None
    while time.perf_counter() - t < args.seconds + args.tail:
        for _ in range(args.depth):
            xs = [f(x) for x in xs]
        waited, last = (last, list(xs)) if args.tail else (xs, None)
        for x in waited or []:
            x.block_until_ready()
        if waited and time.perf_counter() - t <= args.seconds:
            done += args.depth * len(xs)
    return {"programs": done, "seconds": args.seconds if args.tail else time.perf_counter() - t}


def compile_time(jax, args):
    """Seconds for the compile step (`.compile()` of jax.jit(f).lower(x)) of a model that
    takes over a second to compile from scratch (`--layers` unrolled layers), and for the
    tracing and lowering before it; then one call, checked."""
    import jax.numpy as jnp

    def f(x):
        for i in range(args.layers):
            x = jnp.tanh(x @ x.T * (1.0 / (i + 1)) + i)
            x = jnp.where(x > 0, jnp.sin(x), jnp.cos(x)) * (i % 7 + 1)
            x = jnp.roll(x, i % 5, axis=0)
        return x.sum()

    x = np.ones((32, 32), np.float32)
    started = time.perf_counter()
    lowered = jax.jit(f).lower(x)
    lowered_at = time.perf_counter()
    compiled = lowered.compile()
    done = time.perf_counter()
    assert np.isfinite(float(compiled(x)))
    return {"compile_s": done - lowered_at, "lower_s": lowered_at - started}


def hold(jax, args):
    """A session of a shared pool: READY once its slices are placed (its first
    jax.devices() returns), then holds them until a line on stdin."""
    jax.devices()
    placed_at = time.time()
    print("READY", flush=True)
    sys.stdin.readline()
    import switchyard
    switchyard.shutdown()  # the session ends here: its lease goes back
    return {"placed_at": placed_at, "closed_at": time.time()}


CASES = {"compile_time": compile_time, "hold": hold, "micro": micro, "latency": latency,
         "bandwidth": bandwidth, "crossover": crossover, "calibrate": calibrate,
         "client_load": client_load, "copies": copies}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("system", choices=["local", "proxy"])
    p.add_argument("case", choices=list(CASES))
    p.add_argument("--signal_sync", action="store_true",
                   help="latency: pause before and after the synchronous loop (for CPU sampling)")
    p.add_argument("--slices", type=int, default=1)
    p.add_argument("--per_slice", type=int, default=4)
    p.add_argument("--iters", type=int, default=300)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--sizes", type=int, nargs="*", default=[1, 16, 64])
    p.add_argument("--ks", type=int, nargs="*", default=[1])
    p.add_argument("--durations", default="{}")
    p.add_argument("--budget_s", type=float, default=1.0)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--tail", type=float, default=0.0)
    p.add_argument("--depth", type=int, default=32)
    p.add_argument("--layers", type=int, default=80)
    p.add_argument("--h2d_only", action="store_true", help="bandwidth: host -> device only")
    args = p.parse_args()
    args.durations_s = json.loads(args.durations)
    jax = setup(args.system, max(4, args.slices * args.per_slice))
    result = CASES[args.case](jax, args)
    print("RESULT " + json.dumps(result), flush=True)
    if args.system == "proxy":
        import switchyard
        switchyard.shutdown()


if __name__ == "__main__":
    main()
