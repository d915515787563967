"""A soak client: for `--seconds`, over and over, puts arrays of varying sizes on the
devices (sharded over a slice's devices, replicated, or on one device), runs a jitted
program on them, fetches the results and compares them with NumPy, moves one to another
slice now and then, and deletes every array explicitly. Every `--compile-every`
iterations it compiles a new small program, runs it once and drops it, so executables
are created and freed all along.

It prints a JSON line every couple of seconds (`iterations`, `compiles`) and a last one
with `done`. Any exception or wrong result prints the traceback and exits with 1."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

ROWS = (2, 16, 128, 1024, 4096)  # x COLS float32: 512 B .. 1 MiB an array
COLS = 64


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--name", default="client")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compile-every", type=int, default=25)
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding

    import switchyard

    switchyard.initialize()
    start = time.monotonic()
    rng = np.random.default_rng(args.seed)

    def say(**kw):
        print(json.dumps({"client": args.name, "t": round(time.monotonic() - start, 2), **kw}),
              flush=True)

    slices: dict[int, list] = {}
    for d in jax.devices():
        slices.setdefault(d.slice_index, []).append(d)
    order = sorted(slices)
    meshes = {s: Mesh(np.array(slices[s]), ("x",)) for s in order}
    say(started=True, slices=len(order), devices=sum(len(v) for v in slices.values()))

    @jax.jit
    def step(a, b):
        return a * 2.0 + b, jnp.sum(a * b, axis=1)

    def sharding(slice_index: int, kind: int):
        devices = slices[slice_index]
        if kind == 0:
            return NamedSharding(meshes[slice_index], P("x"))  # split over the slice
        if kind == 1:
            return NamedSharding(meshes[slice_index], P())  # replicated
        return SingleDeviceSharding(devices[int(rng.integers(len(devices)))])

    iterations = compiles = moves = 0
    last_say = 0.0
    while time.monotonic() - start < args.seconds:
        s = order[iterations % len(order)]
        rows = int(rng.choice(ROWS))
        sh = sharding(s, iterations % 3)
        a_host = rng.standard_normal((rows, COLS), dtype=np.float32)
        b_host = rng.standard_normal((rows, COLS), dtype=np.float32)
        a = jax.device_put(a_host, sh)
        b = jax.device_put(b_host, sh)
        c, d = step(a, b)
        np.testing.assert_allclose(np.asarray(c), a_host * 2.0 + b_host, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.asarray(d), np.sum(a_host * b_host, axis=1),
                                   rtol=1e-4, atol=1e-4)
        if iterations % 4 == 0:
            np.testing.assert_array_equal(np.asarray(a), a_host)  # the bytes as put
        arrays = [a, b, c, d]
        if len(order) > 1 and iterations % 5 == 0:
            # Worker to worker: onto the next slice, with another layout.
            other = order[(iterations + 1) % len(order)]
            moved = jax.device_put(c, sharding(other, (iterations // 5) % 3))
            np.testing.assert_allclose(np.asarray(moved), a_host * 2.0 + b_host,
                                       rtol=1e-6, atol=1e-6)
            arrays.append(moved)
            moves += 1
        if iterations % args.compile_every == 0:
            # A program no one has compiled before (its constant is new), run once and
            # dropped: the executable is created and then freed.
            k = float(iterations + 1)
            program = jax.jit(lambda x, k=k: jnp.tanh(x) * k + 1.0)
            x = jax.device_put(a_host[:2], NamedSharding(meshes[s], P("x")))
            y = program(x)
            np.testing.assert_allclose(np.asarray(y), np.tanh(a_host[:2]) * k + 1.0,
                                       rtol=1e-5, atol=1e-5)
            arrays += [x, y]
            del program
            compiles += 1
            if compiles % 8 == 0:
                # JAX keeps compiled programs in caches of its own; emptied now and then
                # so that what the client drops is really released on the servers.
                jax.clear_caches()
        for array in arrays:
            array.delete()
            if not array.is_deleted():
                raise AssertionError("delete() left the array alive")
        del a, b, c, d, arrays
        iterations += 1
        if time.monotonic() - last_say > 2.0:
            last_say = time.monotonic()
            say(iterations=iterations, compiles=compiles, moves=moves)
    say(done=True, iterations=iterations, compiles=compiles, moves=moves)
    switchyard.shutdown()


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # loudly: the traceback, a JSON line, exit 1
        traceback.print_exc()
        print(json.dumps({"error": f"{type(e).__name__}: {e}"[:2000]}), flush=True)
        sys.stderr.flush()
        os._exit(1)  # not through JAX's exit handlers, which may wait on the proxy
