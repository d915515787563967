"""Train a small MLP with optax on a Switchyard cluster, through the proxy.

An ordinary JAX program: the only Switchyard-specific line is `initialize`. The
same steps also run on JAX's own CPU backend, and the losses are compared.

    python examples/train_mlp.py                      # starts a local cluster itself
    python examples/train_mlp.py --target grpc://127.0.0.1:29000   # an existing one
"""

import argparse
import contextlib

import numpy as np

import switchyard


def make_data(rng, n=512):
    x = rng.normal(size=(n, 16)).astype(np.float32)
    w = rng.normal(size=(16, 1)).astype(np.float32)
    y = np.tanh(x @ w) + 0.1 * rng.normal(size=(n, 1)).astype(np.float32)
    return x, y


def train(device, x, y, steps):
    """Trains on `device`; returns the loss of every step."""
    import jax
    import jax.numpy as jnp
    import optax

    def init(key):
        k1, k2 = jax.random.split(key)
        return {"w1": jax.random.normal(k1, (16, 64)) * 0.1, "b1": jnp.zeros(64),
                "w2": jax.random.normal(k2, (64, 1)) * 0.1, "b2": jnp.zeros(1)}

    def loss_fn(params, x, y):
        h = jax.nn.relu(x @ params["w1"] + params["b1"])
        return jnp.mean((h @ params["w2"] + params["b2"] - y) ** 2)

    optimizer = optax.adam(1e-2)

    @jax.jit
    def step(params, state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    with jax.default_device(device):
        params = init(jax.random.key(0))
        state = optimizer.init(params)
        x, y = jax.device_put(x, device), jax.device_put(y, device)
        losses = []
        for _ in range(steps):
            params, state, loss = step(params, state, x, y)
            losses.append(loss)  # stays on the device; fetched once at the end
        return [float(loss) for loss in losses]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", help="proxy address; default: start a local cluster")
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()

    cluster = contextlib.nullcontext() if args.target else switchyard.LocalCluster()
    with cluster as c:
        import jax
        # "proxy,cpu": the proxy is the default backend, JAX's CPU backend the reference.
        jax.config.update("jax_platforms", "proxy,cpu")
        switchyard.initialize(args.target if c is None else c.target)
        devices = jax.devices()
        print(f"{len(devices)} devices through the proxy: {devices[0].client.runtime_type}, "
              f"slices {sorted({d.slice_index for d in devices})}")
        x, y = make_data(np.random.default_rng(0))
        remote = train(devices[0], x, y, args.steps)
        local = train(jax.devices("cpu")[0], x, y, args.steps)
        for i in list(range(0, args.steps, max(1, args.steps // 10))) + [args.steps - 1]:
            print(f"step {i:4d}  loss {remote[i]:.6f}  (local JAX CPU {local[i]:.6f})")
        np.testing.assert_allclose(remote, local, rtol=1e-4, atol=1e-6)
        assert remote[-1] < remote[0] / 2, "the loss did not go down"
        print(f"OK: {args.steps} steps through Switchyard match local JAX")
        del devices  # devices hold the proxy session open
        switchyard.shutdown()  # before the cluster goes away


if __name__ == "__main__":
    main()
