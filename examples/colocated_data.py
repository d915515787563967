"""Input pipelines on the hosts with colocated Python: a colocated iterator on each
slice's host makes that slice's batches (in its worker's sidecar, from the host's own
data), and the training step consumes them where they are. The client sends a step
number and never touches a batch's bytes. Checked against full-batch training on JAX's
own CPU backend.

    python examples/colocated_data.py                # starts a 2-slice local cluster
    python examples/colocated_data.py --target grpc://127.0.0.1:29000
"""

import argparse
import contextlib

import numpy as np

import switchyard

ROWS = 32  # per slice and step


def host_batch(slice_index, step):
    """The rows a slice's host reads for `step` (here: made up from a seed)."""
    rng = np.random.default_rng(1000 * step + slice_index)
    x = rng.normal(size=(ROWS, 8)).astype(np.float32)
    return x, np.sin(x.sum(axis=1, keepdims=True)).astype(np.float32)


def loss_fn(params, x, y):
    import jax.numpy as jnp
    return jnp.mean((jnp.tanh(x @ params["w1"]) @ params["w2"] - y) ** 2)


class HostLoader:
    """Runs in a sidecar: one per slice, holding its position (module state persists)."""

    def __init__(self, slice_index):
        self.slice_index = slice_index
        self.batches = 0

    def next(self, step):
        import jax
        import numpy as np
        number = int(np.asarray(step.addressable_shards[0].data))
        x, y = host_batch(self.slice_index, number)
        self.batches += 1
        sharding = jax.sharding.NamedSharding(
            jax.sharding.Mesh(np.array(step.sharding.mesh.devices), ("batch",)),
            jax.sharding.PartitionSpec("batch"))
        return (jax.make_array_from_callback(x.shape, sharding, lambda i: x[i]),
                jax.make_array_from_callback(y.shape, sharding, lambda i: y[i]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", help="proxy address; default: start a local cluster")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    params0 = {"w1": (rng.normal(size=(8, 32)) * 0.3).astype(np.float32),
               "w2": (rng.normal(size=(32, 1)) * 0.3).astype(np.float32)}
    cluster = (contextlib.nullcontext() if args.target
               else switchyard.LocalCluster(workers=2, devices_per_worker=2))
    with cluster as c:
        import jax
        from jax.experimental import colocated_python
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        jax.config.update("jax_platforms", "proxy,cpu")
        switchyard.initialize(args.target if c is None else c.target)
        n = switchyard.num_slices()
        Loader = colocated_python.colocated_python_class(HostLoader)
        loaders, meshes, params = [], [], []
        for s in range(n):
            devices = colocated_python.colocated_cpu_devices(switchyard.slice_devices(s))
            meshes.append(Mesh(np.array(devices), ("batch",)))
            # colocated_python_class is typed as returning type[object]; it is HostLoader's
            # wrapper, which takes HostLoader's arguments and has its methods.
            loaders.append(Loader(s))  # type: ignore[call-arg]
            params.append(jax.device_put(params0, NamedSharding(meshes[-1], P())))
        grad = jax.jit(jax.grad(loss_fn))
        update = jax.jit(lambda p, g: jax.tree_util.tree_map(lambda a, b: a - 0.2 * b, p, g))
        cpu = jax.devices("cpu")[0]
        local = jax.device_put(params0, cpu)
        for step in range(args.steps):
            grads = []
            for s in range(n):
                number = jax.device_put(np.array(step, np.int32), NamedSharding(meshes[s], P()))
                # Made on the slice's host (HostLoader.next; see the ignore on Loader(s)).
                x, y = loaders[s].next(number)  # type: ignore[attr-defined]
                grads.append(grad(params[s], x, y))
            grads = switchyard.mean_across_slices(grads)
            params = [update(p, g) for p, g in zip(params, grads)]
            full = [np.concatenate(parts)
                    for parts in zip(*(host_batch(s, step) for s in range(n)))]
            local = update(local, grad(local, *jax.device_put(full, cpu)))
            if step % 10 == 0 or step == args.steps - 1:
                print(f"step {step:3d}: loss {float(loss_fn(local, *full)):.6f}")
        for p in params:
            for k in p:
                np.testing.assert_allclose(np.asarray(p[k]), np.asarray(local[k]), rtol=1e-4,
                                           atol=1e-5)
        print(f"OK: {n} hosts loaded their own batches for {args.steps} steps; "
              "training matches local JAX")
        del params, grads, loaders, local
        switchyard.shutdown()


if __name__ == "__main__":
    main()
