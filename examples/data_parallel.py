"""Data parallelism across slices on CPU: each slice computes the gradient of its
half of the batch (SPMD over its own devices), `switchyard.mean_across_slices`
averages the gradients through worker-to-worker transfers, and every slice applies
the same update. Checked against full-batch training on JAX's own CPU backend.

    python examples/data_parallel.py                # starts a 2-slice local cluster
    python examples/data_parallel.py --target grpc://127.0.0.1:29000
"""

import argparse
import contextlib

import numpy as np

import switchyard


def loss_fn(params, x, y):
    import jax.numpy as jnp
    h = jnp.tanh(x @ params["w1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", help="proxy address; default: start a local cluster")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 8)).astype(np.float32)
    y = np.sin(x.sum(axis=1, keepdims=True)).astype(np.float32)
    params0 = {"w1": (rng.normal(size=(8, 32)) * 0.3).astype(np.float32),
               "w2": (rng.normal(size=(32, 1)) * 0.3).astype(np.float32)}

    cluster = (contextlib.nullcontext() if args.target
               else switchyard.LocalCluster(workers=2, devices_per_worker=4))
    with cluster as c:
        import jax
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        jax.config.update("jax_platforms", "proxy,cpu")
        switchyard.initialize(args.target if c is None else c.target)
        n = switchyard.num_slices()
        meshes = [Mesh(np.array(switchyard.slice_devices(s)), ("batch",)) for s in range(n)]
        grad = jax.jit(jax.grad(loss_fn))
        update = jax.jit(lambda p, g: jax.tree_util.tree_map(lambda a, b: a - 0.2 * b, p, g))
        # Per slice: replicated parameters, the slice's share of the batch split over its devices.
        params = [jax.device_put(params0, NamedSharding(m, P())) for m in meshes]
        shards = np.split(np.arange(len(x)), n)
        xs = [jax.device_put(x[i], NamedSharding(m, P("batch"))) for i, m in zip(shards, meshes)]
        ys = [jax.device_put(y[i], NamedSharding(m, P("batch"))) for i, m in zip(shards, meshes)]
        cpu = jax.devices("cpu")[0]
        local, x_local, y_local = jax.device_put((params0, x, y), cpu)
        for step in range(args.steps):
            grads = [grad(p, xi, yi) for p, xi, yi in zip(params, xs, ys)]
            grads = switchyard.mean_across_slices(grads)
            params = [update(p, g) for p, g in zip(params, grads)]
            local = update(local, grad(local, x_local, y_local))
            if step % 10 == 0 or step == args.steps - 1:
                loss = float(jax.jit(loss_fn)(params[0], xs[0], ys[0]))
                print(f"step {step:3d}: loss {loss:.6f} (slice 0's half)")
        for p in params:
            for k in p:
                np.testing.assert_allclose(np.asarray(p[k]), np.asarray(local[k]), rtol=1e-4,
                                           atol=1e-5)
        print(f"OK: {n} slices x {args.steps} steps match full-batch local JAX")
        del params, grads, xs, ys, local, x_local, y_local
        switchyard.shutdown()


if __name__ == "__main__":
    main()
