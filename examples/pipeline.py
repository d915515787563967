"""An MPMD pipeline: a 4-stage model, one stage per slice, microbatches flowing
from slice to slice. The client issues every launch and transfer without waiting;
activations move worker to worker. The result is checked against the same model
run by JAX's own CPU backend.

    python examples/pipeline.py                     # starts a 4-slice local cluster
    python examples/pipeline.py --target grpc://127.0.0.1:29000
"""

import argparse
import contextlib
import time

import numpy as np

import switchyard

STAGES = 4
WIDTH = 128


def stage(params, x):
    import jax.numpy as jnp
    return jnp.tanh(x @ params["w"] + params["b"])


def make_params(rng):
    return [{"w": (rng.normal(size=(WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32),
             "b": rng.normal(size=(WIDTH,)).astype(np.float32) * 0.1} for _ in range(STAGES)]


def run_pipeline(params, microbatches, devices):
    """Stage s on devices[s]; returns the outputs (on the last stage's device)."""
    import jax
    step = jax.jit(stage)
    placed = [jax.device_put(p, d) for p, d in zip(params, devices)]
    outputs = []
    for mb in microbatches:
        x = jax.device_put(mb, devices[0])
        for s in range(STAGES):
            x = step(placed[s], jax.device_put(x, devices[s]))
        outputs.append(x)
    return outputs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", help="proxy address; default: start a local cluster")
    parser.add_argument("--microbatches", type=int, default=16)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    params = make_params(rng)
    microbatches = [rng.normal(size=(32, WIDTH)).astype(np.float32)
                    for _ in range(args.microbatches)]

    cluster = (contextlib.nullcontext() if args.target
               else switchyard.LocalCluster(workers=STAGES, devices_per_worker=2))
    with cluster as c:
        import jax
        jax.config.update("jax_platforms", "proxy,cpu")
        switchyard.initialize(args.target if c is None else c.target)
        if switchyard.num_slices() < STAGES:
            raise SystemExit(f"needs {STAGES} slices, the cluster has {switchyard.num_slices()}")
        devices = [switchyard.slice_devices(s)[0] for s in range(STAGES)]
        print("stages on", [f"slice {d.slice_index} device {d.id}" for d in devices])
        run_pipeline(params, microbatches[:1], devices)[0].block_until_ready()  # compile
        start = time.perf_counter()
        outputs = run_pipeline(params, microbatches, devices)
        issued = time.perf_counter()
        jax.block_until_ready(outputs)
        done = time.perf_counter()
        local = run_pipeline(params, microbatches, [jax.devices("cpu")[0]] * STAGES)
        for got, want in zip(outputs, local):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
        print(f"{args.microbatches} microbatches x {STAGES} stages: issued in "
              f"{(issued - start) * 1e3:.1f} ms, done in {(done - start) * 1e3:.1f} ms")
        print("OK: the pipeline matches local JAX")
        del outputs, local
        switchyard.shutdown()


if __name__ == "__main__":
    main()
