"""Elastic data-parallel training: survives the loss of a slice and grows back.

An MLP is trained data-parallel over every slice of the cluster (one replica per
slice; gradients averaged across slices worker to worker, as on CPU a program cannot
span slices), under the stock `pathwaysutils.elastic` Manager (`elastic_retry`), with
`switchyard.elastic.Snapshot` keeping the state in the hosts' pinned memory every few
steps. When a slice is lost, the step fails with DATA_LOSS, the Manager waits for the
slices that are left, and training goes on from the last snapshot on N-1 slices with
the global batch scaled down. When the slice returns, the Manager's monitor sees it,
the loop raises `ScaleUpSignalError` at the next step boundary, and training grows
back. Nothing is read from disk.

    .venv/bin/python examples/elastic_train.py                 # its own cluster, 3 slices
    .venv/bin/python examples/elastic_train.py --kill-at 15    # ... and kill slice 1 there
    .venv/bin/python examples/elastic_train.py --target grpc://127.0.0.1:29000

`--kill-at STEP` (own cluster only) kills slice 1's worker with SIGKILL after that
step; `switchyard up` restarts it, as a fleet's orchestrator would. The example prints
one JSON line per step: {"step", "loss", "slices", "time"}, and a last one with
"done".
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time


def loss_fn(params, x, y):
    import jax.numpy as jnp

    h = jnp.tanh(x @ params["w1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


def client(args) -> None:
    import jax
    import numpy as np
    import pathwaysutils
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from pathwaysutils.elastic import manager

    import switchyard
    from switchyard.elastic import Snapshot

    pathwaysutils.initialize()
    mgr = manager.Manager()
    snapshot = Snapshot()
    rng = np.random.default_rng(0)
    params0 = {"w1": (rng.normal(size=(args.features, 32)) * 0.3).astype(np.float32),
               "w2": (rng.normal(size=(32, 1)) * 0.3).astype(np.float32)}
    start = time.monotonic()
    victim = os.environ.get("SWITCHYARD_VICTIM_PID")

    def batch(step: int, size: int):
        r = np.random.default_rng(step)
        x = r.normal(size=(size, args.features)).astype(np.float32)
        return x, np.sin(x.sum(axis=1, keepdims=True)).astype(np.float32)

    grad = jax.jit(jax.value_and_grad(loss_fn))
    update = jax.jit(lambda p, g: jax.tree_util.tree_map(lambda a, b: a - args.lr * b, p, g))

    @mgr.elastic_retry(minimum_slice_count=args.min_slices, poll_interval=0.5, timeout=300)
    def train():
        nonlocal victim
        slices = sorted(mgr.active_slice_indices)
        meshes = [Mesh(np.array(mgr.slice_to_devices[s]), ("batch",)) for s in slices]
        replicated = [{"w1": NamedSharding(m, P()), "w2": NamedSharding(m, P())} for m in meshes]
        by_example = [NamedSharding(m, P("batch")) for m in meshes]
        if snapshot.step is not None:
            params, step = snapshot.restore(replicated), snapshot.step
        else:
            params, step = [jax.device_put(params0, r) for r in replicated], 0
        # The global batch follows the slices: each slice always takes the same share.
        global_batch = mgr.scale_by_active_slices(args.batch_per_slice * mgr.total_slice_count)
        while step < args.steps:
            x, y = batch(step, global_batch)
            parts = np.split(np.arange(global_batch), len(slices))
            results = [grad(p, jax.device_put(x[i], s), jax.device_put(y[i], s))
                       for p, i, s in zip(params, parts, by_example)]
            grads = switchyard.mean_across_slices([g for _, g in results])
            params = [update(p, g) for p, g in zip(params, grads)]
            # Waits for the step: a lost slice shows up here, as DATA_LOSS.
            loss = float(np.mean([float(loss) for loss, _ in results]))
            step += 1
            print(json.dumps({"step": step, "loss": round(loss, 6), "slices": len(slices),
                              "time": round(time.monotonic() - start, 3)}), flush=True)
            if step % args.snapshot_every == 0:
                snapshot.save(step, params)
            if victim and step == args.kill_at:
                os.kill(int(victim), signal.SIGKILL)
                victim = None
                print(json.dumps({"killed_slice": 1, "after_step": step,
                                  "time": round(time.monotonic() - start, 3)}), flush=True)
            if mgr.available_inactive_slices:
                snapshot.save(step, params)  # grow back from this very step
                raise manager.ScaleUpSignalError()
            if args.step_sleep:
                time.sleep(args.step_sleep)
        return params

    params = train()
    x, y = batch(10**6, 256)
    final = float(loss_fn(jax.device_get(params[0]), x, y))
    print(json.dumps({"done": True, "slices": len(params), "loss": round(final, 6)}), flush=True)
    mgr.close()
    del params
    switchyard.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", help="an existing cluster's proxy (grpc://host:port)")
    parser.add_argument("--slices", type=int, default=3)
    parser.add_argument("--devices-per-slice", type=int, default=2)
    parser.add_argument("--min-slices", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--features", type=int, default=8)
    parser.add_argument("--batch-per-slice", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.2)
    parser.add_argument("--snapshot-every", type=int, default=5)
    parser.add_argument("--kill-at", type=int, default=0, help="kill slice 1's worker at this step")
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        client(args)
        return
    if args.target:
        env = {**os.environ, "JAX_PLATFORMS": "proxy", "JAX_BACKEND_TARGET": args.target,
               "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS": "true"}
        sys.exit(subprocess.run([sys.executable, __file__, "--client", *sys.argv[1:]],
                                env=env).returncode)
    from switchyard import LocalCluster

    with LocalCluster(workers=args.slices, devices_per_worker=args.devices_per_slice) as cluster:
        env = {**os.environ, **cluster.env()}
        if args.kill_at:
            env["SWITCHYARD_VICTIM_PID"] = str(cluster.child_pid("worker", slice_index=1))
        code = subprocess.run([sys.executable, __file__, "--client", *sys.argv[1:]],
                              env=env).returncode
    sys.exit(code)


if __name__ == "__main__":
    main()
