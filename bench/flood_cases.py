"""Clients of the flood benchmark (bench/run.py `flood`), run as processes:

    flood_cases.py flood N     launches N programs without waiting, then waits once
    flood_cases.py sync S      for S seconds, one small program at a time, each waited on

Each prints `RESULT <json>`; `flood` prints `ISSUED` once its loop is done."""

import json
import sys
import time

import numpy as np


def main():
    import jax
    import jax.numpy as jnp

    import switchyard
    switchyard.initialize()
    mode, amount = sys.argv[1], float(sys.argv[2])
    if mode == "flood":
        # About 0.3 ms of CPU each: a queue of them is seconds of device work.
        step = jax.jit(lambda x: jnp.tanh(x @ x))
        x = jnp.eye(192, dtype=jnp.float32)
        x.block_until_ready()
        start = time.perf_counter()
        for _ in range(int(amount)):
            x = step(x)
        print("ISSUED", flush=True)
        x.block_until_ready()
        elapsed = time.perf_counter() - start
        print("RESULT " + json.dumps({"launches_per_s": amount / elapsed}), flush=True)
        return
    small = jax.jit(lambda v: v * 2)
    v = jnp.ones((16,), jnp.float32)
    t = time.perf_counter()
    np.asarray(small(v))  # with its compile
    first = time.perf_counter() - t
    times = []
    end = time.perf_counter() + amount
    while time.perf_counter() < end:
        t = time.perf_counter()
        np.asarray(small(v))
        times.append(time.perf_counter() - t)
        time.sleep(0.02)
    times.sort()
    print("RESULT " + json.dumps({"first_s": first, "calls": len(times),
                                  "p50_s": times[len(times) // 2],
                                  "max_s": times[-1]}), flush=True)


if __name__ == "__main__":
    main()
