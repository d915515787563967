"""Train a small linear model on a local Switchyard cluster's workers.

The parameters stay on a worker's device between steps: each step's outputs are
the next step's inputs, and only the loss comes back. The same steps run on JAX's
own CPU backend for comparison. (Until the proxy lands, programs are compiled and
launched through the worker API directly; see README.)
"""

import jax
import jax.numpy as jnp
import numpy as np

import switchyard


def step(w, b, x, y):
    def loss_fn(w, b):
        return jnp.mean((x @ w + b - y) ** 2)

    loss, (gw, gb) = jax.value_and_grad(loss_fn, argnums=(0, 1))(w, b)
    return w - 0.1 * gw, b - 0.1 * gb, loss


def main():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype(np.float32)
    true_w = rng.normal(size=(8, 1)).astype(np.float32)
    y = (x @ true_w + 0.5).astype(np.float32)
    w0, b0 = np.zeros((8, 1), np.float32), np.zeros((1,), np.float32)

    with switchyard.LocalCluster(workers=2, devices_per_worker=4) as cluster:
        fleet = cluster.status()
        print(f"cluster: {len(fleet['slices'])} slices, "
              f"{sum(len(h['devices']) for s in fleet['slices'] for h in s['hosts'])} devices")
        for address in cluster.worker_addresses():
            with switchyard.WorkerClient(address) as worker:
                info = worker.info()
                device = info.devices[-1].global_id
                program = switchyard.lower_portable(
                    step, w0, b0, x, y, target=info.plugin.stablehlo_current_version)
                exe, _ = worker.compile(program, [device])
                w, b = worker.put(w0, device), worker.put(b0, device)
                xs, ys = worker.put(x, device), worker.put(y, device)
                lw, lb = jnp.asarray(w0), jnp.asarray(b0)
                for i in range(50):
                    [[w2, b2, loss]] = worker.execute(exe, [[w, b, xs, ys]], 3)
                    worker.delete([w, b])
                    w, b = w2, b2
                    lw, lb, local_loss = jax.jit(step)(lw, lb, x, y)
                    remote_loss = float(worker.get(loss))
                    worker.delete([loss])
                    if i % 10 == 0 or i == 49:
                        print(f"worker {address} device {device} step {i:2d}: "
                              f"loss {remote_loss:.6f} (local JAX {float(local_loss):.6f})")
                np.testing.assert_allclose(worker.get(w), lw, rtol=1e-5, atol=1e-6)
                worker.delete([w, b, xs, ys])
                worker.delete_executables([exe])
    print("OK: the workers' results match local JAX")


if __name__ == "__main__":
    main()
