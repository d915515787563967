"""RL benchmark cases, run in the Tunix venv (.venv-tunix) by run.py's `rl` section.

    python rl_cases.py sync --mib 256 --arrays 1 64 --reps 3    (proxy: slice 0 -> slice 1)
    python rl_cases.py fetch local|proxy --iters 300

Each prints one `RESULT {json}` line.
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np


def weight_sync(args):
    """A parameter pytree of `--arrays` float32 arrays, `--mib` MiB in all, from a mesh
    on slice 0 to the same mesh shape on slice 1: `jax.device_put` and Tunix's own
    `reshard_pytree` (pathwaysutils' side-channel reshard under JAX_PLATFORMS=proxy).
    MB/s of the best and the median of `--reps`, each waited for."""
    os.environ["JAX_PLATFORMS"] = "proxy"
    import switchyard
    switchyard.initialize()
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    from tunix.rl import reshard

    meshes = [Mesh(np.array(switchyard.slice_devices(s)).reshape(-1, 1), ("fsdp", "tp"))
              for s in (0, 1)]
    result = {}
    for arrays in args.arrays:
        columns = (args.mib << 20) // arrays // 4 // 256
        source = {f"w{i}": jax.device_put(np.full((256, columns), i, np.float32),
                                          NamedSharding(meshes[0], PartitionSpec("fsdp")))
                  for i in range(arrays)}
        jax.block_until_ready(source)
        target = jax.tree.map(lambda _: NamedSharding(meshes[1], PartitionSpec("fsdp")), source)
        mb = arrays * 256 * columns * 4 / 1e6
        row = {}
        for name, move in (("device_put", jax.device_put),
                           ("reshard_pytree", reshard.reshard_pytree)):
            jax.block_until_ready(move(source, target))  # plans and compiles
            seconds = []
            for _ in range(args.reps):
                start = time.perf_counter()
                moved = move(source, target)
                jax.block_until_ready(moved)
                seconds.append(time.perf_counter() - start)
                del moved
            row[name] = {"best": mb / min(seconds), "median": mb / statistics.median(seconds)}
        result[str(arrays)] = row
        del source
    return result


def small_fetch(args):
    """`device_get` of 256 bytes (a sampler's tokens): of an array already computed, and
    of a program's output just issued. Milliseconds, p50 and p99."""
    if args.system == "local":
        os.environ["JAX_PLATFORMS"] = "cpu"
        import jax
    else:
        import switchyard
        switchyard.initialize()
        import jax
    tokens = jax.device_put(np.arange(64, dtype=np.int32), jax.devices()[-1])
    step = jax.jit(lambda t: t + 1)
    jax.device_get(step(tokens))
    ready, issued = [], []
    for _ in range(args.iters):
        out = step(tokens)
        out.block_until_ready()
        start = time.perf_counter()
        jax.device_get(out)
        ready.append(time.perf_counter() - start)
        start = time.perf_counter()
        jax.device_get(step(tokens))
        issued.append(time.perf_counter() - start)

    def ms(samples, q):
        return float(np.percentile(samples, q)) * 1e3

    return {"ready_p50_ms": ms(ready, 50), "ready_p99_ms": ms(ready, 99),
            "issued_p50_ms": ms(issued, 50), "issued_p99_ms": ms(issued, 99)}


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="case", required=True)
    sync = sub.add_parser("sync")
    sync.add_argument("--mib", type=int, default=256)
    sync.add_argument("--arrays", type=int, nargs="+", default=[1, 64])
    sync.add_argument("--reps", type=int, default=3)
    fetch = sub.add_parser("fetch")
    fetch.add_argument("system", choices=["local", "proxy"])
    fetch.add_argument("--iters", type=int, default=300)
    args = parser.parse_args()
    result = weight_sync(args) if args.case == "sync" else small_fetch(args)
    print("RESULT " + json.dumps(result), flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
