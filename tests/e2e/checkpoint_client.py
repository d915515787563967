"""Orbax checkpoints through Switchyard with Pathways' persistence API
(ENABLE_PATHWAYS_PERSISTENCE=1): each worker writes and reads its own shards.

    python checkpoint_client.py --init pathwaysutils|switchyard DIR

Builds a flax model's parameters and optax state (f32, bf16, int32, uint8 leaves)
sharded over every device of 2 slices x 4, saves it with Orbax, then restores it onto
the same mesh, onto another mesh (other devices, other partitioning) and onto fewer
slices (slice 0 only), comparing every leaf with the values saved. Writes DIR/expected.npz,
keyed by parameter name, for tensorstore_read.py. The environment gives JAX_BACKEND_TARGET.
"""

import argparse
import os
import sys

import numpy as np


def leaves_equal(restored, expected):
    import jax
    got = jax.tree_util.tree_leaves(restored)
    want = jax.tree_util.tree_leaves(expected)
    assert len(got) == len(want), (len(got), len(want))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--init", choices=["pathwaysutils", "switchyard"], required=True)
    parser.add_argument("--width", type=int, default=64, help="the model's hidden width")
    parser.add_argument("directory")
    args = parser.parse_args()
    os.environ["ENABLE_PATHWAYS_PERSISTENCE"] = "1"
    import jax
    jax.config.update("jax_platforms", "proxy,cpu")
    if args.init == "pathwaysutils":
        import pathwaysutils
        pathwaysutils.initialize()
    else:
        import switchyard
        switchyard.initialize()
    import flax.linen as nn
    import jax.numpy as jnp
    import optax
    import orbax.checkpoint as ocp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    devices = jax.devices()
    assert len(devices) == 8, devices

    class Mlp(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Dense(args.width)(x))
            return nn.Dense(8)(x)

    def forward(params, x) -> jax.Array:
        # No mutable collections asked for: apply gives the output alone (its type says
        # "or with the updated state").
        return Mlp().apply(params, x)  # type: ignore[return-value]

    # Built on the client's CPU, then placed: the state spans both slices, and no
    # program runs across slices on CPU workers.
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        params = Mlp().init(jax.random.key(0), jnp.ones((4, 16)))
        opt_state = optax.adam(1e-3).init(params)
        host = {
            "params": params,
            "opt_state": opt_state,
            "bf16": jnp.arange(64 * 8, dtype=jnp.float32).reshape(64, 8).astype(jnp.bfloat16),
            "step": jnp.array(7, dtype=jnp.int32),
            "bytes": (jnp.arange(32 * 4) % 251).astype(jnp.uint8).reshape(32, 4),
        }
    host = jax.tree_util.tree_map(np.asarray, host)

    def spec(leaf):
        # Rows over 'x', columns over 'y' where they divide; scalars replicated.
        if leaf.ndim == 2:
            return P("x" if leaf.shape[0] % 2 == 0 else None,
                     "y" if leaf.shape[1] % 4 == 0 else None)
        if leaf.ndim == 1:
            return P("y" if leaf.shape[0] % 4 == 0 else None)
        return P()

    def shardings(mesh, specs=spec):
        return jax.tree_util.tree_map(lambda leaf: NamedSharding(mesh, specs(leaf)), host)

    both = Mesh(np.array(devices).reshape(2, 4), ("x", "y"))  # both slices
    state = jax.tree_util.tree_map(jax.device_put, host, shardings(both))
    path = os.path.join(args.directory, "checkpoint")
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, state)
    checkpointer.wait_until_finished()
    def name(path):  # Orbax's parameter name: the keys joined by dots
        return ".".join(str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k))))
                        for k in path)
    np.savez(os.path.join(args.directory, "expected.npz"),
             **{name(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(host)[0]})
    print("SAVED", flush=True)

    def restore(mesh, specs=spec):
        target = jax.tree_util.tree_map(
            lambda leaf, sharding: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding),
            host, shardings(mesh, specs))
        restored = checkpointer.restore(path, target)
        for leaf, want in zip(jax.tree_util.tree_leaves(restored),
                              jax.tree_util.tree_leaves(shardings(mesh, specs))):
            assert leaf.sharding == want, (leaf.sharding, want)
        leaves_equal(restored, host)

    restore(both)
    print("PASS same_mesh", flush=True)
    # Slice 1's devices, reversed, rows split four ways.
    other = Mesh(np.array(devices[4:][::-1]).reshape(4, 1), ("x", "y"))
    restore(other,
            lambda leaf: P() if leaf.ndim == 0 else P("x" if leaf.shape[0] % 4 == 0 else None))
    print("PASS other_mesh", flush=True)
    fewer = Mesh(np.array(devices[:4]).reshape(2, 2), ("x", "y"))  # slice 0 only
    restore(fewer)
    print("PASS fewer_slices", flush=True)
    # A model that trains on the restored state: one step on slice 0.
    restored = checkpointer.restore(path, jax.tree_util.tree_map(
        lambda leaf, sharding: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding),
        host, shardings(fewer)))
    loss = jax.jit(lambda p, x: jnp.mean(forward(p, x) ** 2))(
        restored["params"], jax.device_put(np.ones((4, 16), np.float32), NamedSharding(fewer, P())))
    with jax.default_device(cpu):
        want = jnp.mean(forward(host["params"], jnp.ones((4, 16))) ** 2)
    np.testing.assert_allclose(float(loss), float(want), rtol=1e-5)
    print("PASS train_step", flush=True)
    jax.clear_caches()
    import gc
    gc.collect()
    import jax.extend.backend
    jax.extend.backend.clear_backends()


if __name__ == "__main__":
    sys.exit(main())
