"""The Pathways micro-benchmark's work on Ray Core and Ray Compiled Graphs:
one computation = the all-reduce-and-add of a slice's scalars, here a 2-element
mean-plus-one in an actor, feeding the next. Prints one JSON object."""

import json
import logging
import time

import numpy as np
import ray
from ray.dag import InputNode

CHAIN = 128


@ray.remote
class Device:
    def step(self, x):
        return np.full_like(x, x.sum() / len(x) + 1.0)

    def chain(self, x):
        for _ in range(CHAIN):
            x = self.step(x)
        return x


def main(iters=300, reps=5):
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    actor = Device.remote()  # type: ignore[attr-defined]  # added by @ray.remote
    x = np.zeros(2, np.float32)
    ray.get(actor.step.remote(x))
    out = {}
    t = time.perf_counter()
    for _ in range(iters):
        x = ray.get(actor.step.remote(x))
    out["core_opbyop"] = iters / (time.perf_counter() - t)
    t = time.perf_counter()
    for _ in range(reps):
        ref = ray.put(x)
        for _ in range(CHAIN):
            ref = actor.step.remote(ref)
        x = ray.get(ref)
    out["core_chained"] = reps * CHAIN / (time.perf_counter() - t)
    t = time.perf_counter()
    for _ in range(reps):
        x = ray.get(actor.chain.remote(x))
    out["core_fused"] = reps * CHAIN / (time.perf_counter() - t)

    with InputNode() as inp:
        node = actor.step.bind(inp)
    single = node.experimental_compile()
    ray.get(single.execute(x))
    t = time.perf_counter()
    for _ in range(iters):
        x = ray.get(single.execute(x))
    out["cg_opbyop"] = iters / (time.perf_counter() - t)
    single.teardown()
    with InputNode() as inp:
        node = inp
        for _ in range(CHAIN):
            node = actor.step.bind(node)
    chained = node.experimental_compile()
    ray.get(chained.execute(x))
    t = time.perf_counter()
    for _ in range(reps):
        x = ray.get(chained.execute(x))
    out["cg_chained"] = reps * CHAIN / (time.perf_counter() - t)
    chained.teardown()
    print("RESULT " + json.dumps(out), flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
