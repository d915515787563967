"""A JAX client for the end-to-end tests: runs named checks through a Switchyard
proxy and compares each result with JAX's own CPU backend in the same process.

    python proxy_client.py --init pathwaysutils|switchyard [--suite multislice] [CHECK ...]

The default suite expects 2 slices of 4 devices; `multislice` expects 4 slices of 2.

Exits non-zero on the first failing check. The environment gives JAX_BACKEND_TARGET.
"""

import argparse
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

CHECKS: dict[str, Callable[..., Any]] = {}
MULTISLICE: dict[str, Callable[..., Any]] = {}
# Checks that need switchyard.initialize(): with plain pathwaysutils they assert the
# client's own refusal instead.
SWITCHYARD_ONLY: dict[str, Callable[..., Any]] = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def switchyard_check(refused_with):
    """A check that needs switchyard.initialize(); `refused_with(jax)` shows what plain
    pathwaysutils users get instead."""
    def register(fn):
        CHECKS[fn.__name__] = fn
        SWITCHYARD_ONLY[fn.__name__] = refused_with
        return fn
    return register


def multislice_check(fn):
    MULTISLICE[fn.__name__] = fn
    return fn


def jax_modules():
    import jax
    import jax.numpy as jnp
    return jax, jnp


def on_both(fn, *args, rtol=1e-5, atol=1e-6):
    """Runs jit(fn) on proxy device 0 and on the local CPU; asserts they agree."""
    jax, _ = jax_modules()
    proxy, cpu = jax.devices()[0], jax.devices("cpu")[0]
    remote = jax.jit(fn)(*[jax.device_put(a, proxy) for a in args])
    local = jax.jit(fn)(*[jax.device_put(a, cpu) for a in args])
    for r, mine in zip(jax.tree_util.tree_leaves(remote), jax.tree_util.tree_leaves(local)):
        assert r.dtype == mine.dtype and r.shape == mine.shape, (r.dtype, r.shape, mine.dtype,
                                                                 mine.shape)
        assert next(iter(r.devices())).client.runtime_type == "proxy/pathways"
        got = np.asarray(r, dtype=np.float64) if r.dtype.kind == "V" else np.asarray(r)
        np.testing.assert_allclose(got, np.asarray(mine), rtol=rtol, atol=atol)
    return remote


@check
def devices():
    jax, _ = jax_modules()
    devs = jax.devices()
    assert len(devs) == 8, devs
    assert sorted({d.slice_index for d in devs}) == [0, 1]
    assert [d.slice_index for d in devs] == [0] * 4 + [1] * 4
    assert jax.process_index() == 0
    assert devs[0].client.runtime_type == "proxy/pathways"
    assert devs[0].platform == "cpu"
    assert len({d.id for d in devs}) == 8


@check
def programs():
    jax, jnp = jax_modules()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 16)).astype(np.float32)
    w = rng.normal(size=(16, 4)).astype(np.float32)
    on_both(lambda a: jnp.sin(a) * 2 + jnp.exp(-a ** 2), x)
    on_both(lambda a, b: a @ b, x, w, rtol=1e-4)
    on_both(lambda a: (a.sum(), a.max(axis=0), jnp.mean(a, axis=1), jnp.argmax(a, axis=1)), x)
    on_both(jax.grad(lambda p, a: jnp.sum(jnp.tanh(a @ p) ** 2)), w, x, rtol=1e-4)
    on_both(jax.vmap(lambda row: jnp.dot(row, row)), x, rtol=1e-4)
    on_both(lambda a: jax.lax.scan(lambda c, r: (c + r.sum(), c), 0.0, a), x, rtol=1e-4)
    on_both(lambda n: jax.lax.while_loop(lambda s: s[0] < n, lambda s: (s[0] + 1, s[1] * 2),
                                         (0, 1)), np.int32(10))
    def branch(p, a):
        return jax.lax.cond(p > 0, lambda v: v * 2, lambda v: v - 1, a)

    on_both(branch, np.float32(1), x)
    on_both(branch, np.float32(-1), x)
    on_both(lambda k: jax.random.normal(jax.random.wrap_key_data(k), (5, 3)),
            np.asarray(jax.random.key_data(jax.random.key(42))))


@check
def dtypes():
    _, jnp = jax_modules()
    import ml_dtypes
    for dtype in (np.float32, ml_dtypes.bfloat16, np.float16, np.int32, np.int8, np.uint8,
                  np.bool_):
        a = (np.arange(12).reshape(3, 4) % 5).astype(dtype)
        if dtype == np.bool_:
            on_both(lambda v: jnp.logical_not(v) | v[::-1], a)
        else:
            on_both(lambda v: v * 2 + v[::-1], a, rtol=1e-2)
    # The 8-bit floats: made from host buffers, computed on, read back.
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3", "float8_e3m4",
                 "float8_e8m0fnu"):
        dtype = getattr(ml_dtypes, name)
        a = (np.arange(12).reshape(3, 4) % 5 + 1).astype(dtype)
        on_both(lambda v: (v.astype(jnp.float32) * 2).astype(v.dtype), a, rtol=0.2)
        on_both(lambda v: v.astype(jnp.float32) + 1, a, rtol=0.1)
    # Sub-byte types travel unpacked (one byte per element, as numpy holds them); the
    # devices pack them.
    jax, _ = jax_modules()
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
    for name in ("int2", "uint2", "int4", "uint4", "float4_e2m1fn"):
        dtype = getattr(ml_dtypes, name)
        a = (np.arange(32).reshape(8, 4) % 2).astype(dtype)
        on_both(lambda v: v.astype(jnp.float32) * 2, a)
        on_both(lambda v: v[::-1], a)
        sharded = jax.device_put(a, NamedSharding(mesh, P("x")))
        np.testing.assert_array_equal(np.asarray(sharded).astype(np.float32), a.astype(np.float32))
        moved = jax.device_put(sharded, jax.devices()[5])  # to the other slice's worker
        np.testing.assert_array_equal(np.asarray(moved).astype(np.float32), a.astype(np.float32))


@check
def x64():
    jax, jnp = jax_modules()
    jax.config.update("jax_enable_x64", True)
    try:
        a = np.linspace(0, 1, 7, dtype=np.float64)
        r = on_both(lambda v: v * np.float64(1e-300) / np.float64(1e-300) + 1, a, rtol=0, atol=0)
        assert r.dtype == np.float64
        i = np.arange(5, dtype=np.int64) * (1 << 40)
        r = on_both(lambda v: v + (1 << 41), i, rtol=0, atol=0)
        assert r.dtype == np.int64
    finally:
        jax.config.update("jax_enable_x64", False)


@check
def scalars_and_empty():
    _, jnp = jax_modules()
    on_both(lambda s: s * 3 + 1, np.float32(2.5))
    on_both(lambda z: z + 1, np.zeros((0, 4), np.float32))
    on_both(lambda z: jnp.sum(z), np.zeros((0,), np.float32))


@check
def large_round_trip():
    jax, _ = jax_modules()
    a = np.random.default_rng(1).integers(0, 255, size=256 << 20, dtype=np.uint8)  # 256 MiB
    x = jax.device_put(a, jax.devices()[5])
    back = np.asarray(x)
    assert np.array_equal(back, a)


@check
def sharded():
    jax, jnp = jax_modules()
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
    a = np.arange(32, dtype=np.float32).reshape(8, 4)
    x = jax.device_put(a, NamedSharding(mesh, P("x")))
    assert [s.data.shape for s in x.addressable_shards] == [(2, 4)] * 4
    assert np.array_equal(np.asarray(x), a)
    y = jax.jit(lambda v: jnp.sin(v) * 2)(x)
    assert y.sharding.spec == P("x"), y.sharding
    np.testing.assert_allclose(np.asarray(y), np.sin(a) * 2, rtol=1e-6)
    total = jax.jit(lambda v: v.sum())(x)
    np.testing.assert_allclose(float(total), a.sum())
    f = jax.jit(jax.shard_map(lambda v: jax.lax.psum(v, "x"), mesh=mesh, in_specs=P("x"),
                              out_specs=P()))
    np.testing.assert_allclose(np.asarray(f(x)), a.reshape(4, 2, 4).sum(axis=0))
    replicated = jax.device_put(a, NamedSharding(mesh, P()))
    np.testing.assert_array_equal(np.asarray(replicated + 1), a + 1)
    mesh2 = Mesh(np.array(jax.devices()[4:]).reshape(2, 2), ("a", "b"))
    z = jax.device_put(a, NamedSharding(mesh2, P("b", "a")))
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda v: v.T)(z)), a.T)


@check
def cpp_shard_args():
    # jaxlib's C++ argument path sends MakeArraysFromHostBufferShards. jax 0.10 has no
    # switch for it: there the same programs run on the path it has.
    jax, jnp = jax_modules()
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    switch = hasattr(jax.config, "jax_use_cpp_shard_args")
    if switch:
        jax.config.update("jax_use_cpp_shard_args", True)
    try:
        mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
        a = np.arange(32, dtype=np.float32).reshape(8, 4)
        for sharding in (NamedSharding(mesh, P("x")), NamedSharding(mesh, P()),
                         NamedSharding(mesh, P(None, "x"))):
            np.testing.assert_array_equal(np.asarray(jax.device_put(a, sharding)), a)
            z = jax.jit(lambda v: v * 2, in_shardings=sharding)(a)
            np.testing.assert_array_equal(np.asarray(z), a * 2)
        np.testing.assert_array_equal(np.asarray(jax.jit(lambda v: v + 1)(a)), a + 1)
    finally:
        if switch:
            jax.config.update("jax_use_cpp_shard_args", False)


@check
def layouts():
    # Layouts a client chooses (jax.experimental.layout): column-major here. The worker
    # reads the compiled signature, hands hosts major-to-minor bytes and relays an array
    # into the layout a program reads; the client sees the layouts local JAX reports.
    jax, jnp = jax_modules()
    from jax.experimental.layout import Format, Layout
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    results = {}
    for where, device in (("proxy", jax.devices()[0]), ("cpu", jax.devices("cpu")[0])):
        single = jax.sharding.SingleDeviceSharding(device)
        column = Format(Layout(major_to_minor=(1, 0)), single)
        put = jax.device_put(x, column)
        f = jax.jit(lambda v: v @ jnp.arange(8.0, dtype=np.float32).reshape(4, 2) + v[0, :2],
                    in_shardings=column)
        out = jax.jit(lambda v: v * 2, out_shardings=column)(x)
        results[where] = {
            "put": put, "put layout": put.format.layout.major_to_minor,
            "f(put)": f(put), "f(numpy)": f(x), "out": out,
            "out layout": out.format.layout.major_to_minor,
            "chained": jax.jit(lambda v: v + 1)(out), "sliced": out[1:, 2],
            "mixed": put * jax.device_put(np.arange(4.0, dtype=np.float32), device),
            "sum": jnp.sum(put),
        }
    for key, local in results["cpu"].items():
        remote = results["proxy"][key]
        if isinstance(local, tuple):
            assert remote == local, (key, remote, local)
        else:
            np.testing.assert_allclose(np.asarray(remote), np.asarray(local), err_msg=key)


@check
def cross_slice():
    jax, jnp = jax_modules()
    devs = jax.devices()
    a = jax.device_put(np.arange(6, dtype=np.float32), devs[1])
    b = jax.device_put(a, devs[6])
    assert b.devices() == {devs[6]} and b.devices().pop().slice_index == 1
    c = jax.jit(lambda v: v * 10)(b)
    assert c.devices() == {devs[6]}
    np.testing.assert_array_equal(np.asarray(c), np.arange(6) * 10)


@check
def donation_and_delete():
    jax, jnp = jax_modules()
    dev = jax.devices()[2]
    a = jax.device_put(np.ones(4, np.float32), dev)
    b = jax.jit(lambda v: v + 1, donate_argnums=0)(a)
    np.testing.assert_array_equal(np.asarray(b), np.full(4, 2.0))
    assert a.is_deleted()
    c = jax.device_put(np.ones(3, np.float32), dev)
    c.delete()
    assert c.is_deleted()
    try:
        np.asarray(c)
    except RuntimeError as e:
        assert "deleted" in str(e), e
    else:
        raise AssertionError("using a deleted array did not fail")
    np.testing.assert_array_equal(np.asarray(b + 1), np.full(4, 3.0))


@check
def span_is_unimplemented():
    jax, jnp = jax_modules()
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(np.array(jax.devices()), ("x",))
    x = jax.device_put(np.arange(8, dtype=np.float32), NamedSharding(mesh, P("x")))
    try:
        jax.jit(lambda v: v * 2)(x).block_until_ready()
    except Exception as e:
        assert "UNIMPLEMENTED" in str(e) and "span 2 workers" in str(e), e
    else:
        raise AssertionError("a program across two CPU workers did not fail")
    # pmap over every device: refused, saying what to do instead.
    try:
        jax.pmap(lambda v: v * 2)(np.arange(8, dtype=np.float32)).block_until_ready()
    except Exception as e:
        assert "UNIMPLEMENTED" in str(e) and "jax.pmap" in str(e), e
    else:
        raise AssertionError("pmap across two CPU workers did not fail")
    local = jax.devices()[:4]  # one slice's devices
    np.testing.assert_array_equal(
        np.asarray(jax.pmap(lambda v: v * 2, devices=local)(np.arange(4, dtype=np.float32))),
        np.arange(4) * 2)
    # The session stays usable.
    np.testing.assert_array_equal(np.asarray(jnp.arange(3) + 1), [1, 2, 3])


def slices():
    jax, _ = jax_modules()
    out: dict[int, list] = {}
    for d in jax.devices():
        out.setdefault(d.slice_index, []).append(d)
    assert len(out) == 4 and all(len(v) == 2 for v in out.values()), out
    return [out[k] for k in sorted(out)]


@multislice_check
def copies_within_and_across_slices():
    jax, jnp = jax_modules()
    s = slices()
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = jax.device_put(a, s[0][0])
    for target in (s[0][1], s[1][0], s[3][1]):  # same worker, next slice, far slice
        y = jax.device_put(x, target)
        assert y.devices() == {target}
        np.testing.assert_array_equal(np.asarray(jax.jit(lambda v: v + 1)(y)), a + 1)
    for dtype in (np.int8, np.float16, np.bool_, np.int32):
        b = (np.arange(10) % 3).astype(dtype)
        there = jax.device_put(jax.device_put(b, s[0][0]), s[2][0])
        np.testing.assert_array_equal(np.asarray(there), b)
    big = np.random.default_rng(0).normal(size=(1 << 22,)).astype(np.float32)  # 16 MiB
    there = jax.device_put(jax.device_put(big, s[1][1]), s[2][1])
    np.testing.assert_array_equal(np.asarray(there), big)


@multislice_check
def memory_kinds():
    jax, jnp = jax_modules()
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding
    s = slices()
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    x = jax.device_put(a, s[0][0])
    for kind in ("pinned_host", "unpinned_host"):
        for device in (s[0][0], s[2][1]):  # same device, another slice
            y = jax.device_put(x, SingleDeviceSharding(device, memory_kind=kind))
            assert y.sharding.memory_kind == kind
            np.testing.assert_array_equal(np.asarray(y), a)
    mesh = Mesh(np.array(s[1]), ("x",))
    host = jax.device_put(x, NamedSharding(mesh, P("x"), memory_kind="pinned_host"))
    back = jax.device_put(host, NamedSharding(mesh, P("x"), memory_kind="device"))
    assert back.sharding.memory_kind == "device"
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda v: v + 1)(back)), a + 1)


@multislice_check
def sharded_arrays_between_slices():
    jax, jnp = jax_modules()
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    s = slices()
    m0, m1 = Mesh(np.array(s[0]), ("x",)), Mesh(np.array(s[1]), ("x",))
    a = np.arange(48, dtype=np.float32).reshape(8, 6)
    x = jax.device_put(a, NamedSharding(m0, P("x")))
    for target in (NamedSharding(m1, P("x")), NamedSharding(m1, P(None, "x")),
                   NamedSharding(m1, P()), NamedSharding(m0, P(None, "x"))):
        y = jax.device_put(x, target)
        assert y.sharding == target
        np.testing.assert_array_equal(np.asarray(y), a)
        np.testing.assert_array_equal(np.asarray(jax.jit(lambda v: v * 2)(y)), a * 2)


@multislice_check
def pathwaysutils_resharding():
    jax, jnp = jax_modules()
    import pathwaysutils.jax as pw_jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from pathwaysutils.experimental.concatenate_by_mesh_axis import concatenate_by_mesh_axis
    from pathwaysutils.experimental.split_by_mesh_axis import split_by_mesh_axis
    from pathwaysutils.reshard import reshard
    s = slices()
    m0, m1 = Mesh(np.array(s[0]), ("x",)), Mesh(np.array(s[2]), ("x",))
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    x = jax.device_put(a, NamedSharding(m0, P("x")))
    tree = reshard({"a": x, "b": [x]}, NamedSharding(m1, P(None, "x")), donate=False)
    np.testing.assert_array_equal(np.asarray(tree["a"]), a)
    assert tree["b"][0].sharding.mesh.devices.tolist() == m1.devices.tolist()
    [moved] = pw_jax.transfer_to_shardings([x], [NamedSharding(m1, P("x"))])
    np.testing.assert_array_equal(np.asarray(moved), a)
    m2 = Mesh(np.array(s[0] + s[1] + s[2] + s[3]).reshape(4, 2), ("slice", "x"))
    big = np.arange(128, dtype=np.float32).reshape(8, 16)
    z = jax.device_put(big, NamedSharding(m2, P("slice", "x")))
    parts = split_by_mesh_axis([z], "slice")
    assert len(parts) == 4
    for i, [p] in enumerate(parts):
        np.testing.assert_array_equal(np.asarray(p), big[2 * i:2 * i + 2])
        assert {d.slice_index for d in p.devices()} == {i}
    [joined] = concatenate_by_mesh_axis(parts, "slice")
    np.testing.assert_array_equal(np.asarray(joined), big)


@multislice_check
def mean_across_slices_helper():
    jax, jnp = jax_modules()
    import switchyard
    s = slices()
    trees = [{"g": jax.device_put(np.full((3, 2), float(i), np.float32), s[i][0]),
              "h": [jax.device_put(np.arange(4.0, dtype=np.float32) * i, s[i][1])]}
             for i in range(4)]
    means = switchyard.mean_across_slices(trees)
    for i, tree in enumerate(means):
        np.testing.assert_allclose(np.asarray(tree["g"]), np.full((3, 2), 1.5))
        np.testing.assert_allclose(np.asarray(tree["h"][0]), np.arange(4.0) * 1.5)
        assert tree["g"].devices() == {s[i][0]} and tree["h"][0].devices() == {s[i][1]}


@multislice_check
def dependent_launches_never_block():
    import time
    jax, jnp = jax_modules()
    s = slices()
    d0, d1 = s[0][0], s[1][0]
    f = jax.jit(lambda x, w: jnp.tanh(x @ w) + x * 0.5)
    w0 = jax.device_put(np.eye(256, dtype=np.float32) * 0.5, d0)
    w1 = jax.device_put(w0, d1)
    x = jax.device_put(np.ones((256, 256), np.float32), d0)
    jax.block_until_ready(f(jax.device_put(f(x, w0), d1), w1))  # compile both
    reference = np.ones((256, 256), np.float32)
    start = time.perf_counter()
    for _ in range(500):  # 1000 launches, alternating slices, each needing the last
        x = jax.device_put(f(x, w0), d1)
        x = jax.device_put(f(x, w1), d0)
    issued = time.perf_counter()
    x.block_until_ready()
    done = time.perf_counter()
    ratio = (issued - start) / (done - start)
    print(f"1000 dependent launches: issued in {issued - start:.3f} s, done in "
          f"{done - start:.3f} s (ratio {ratio:.2f})", flush=True)
    assert ratio < 0.5, ratio
    for _ in range(1000):
        reference = np.tanh(reference @ (np.eye(256, dtype=np.float32) * 0.5)) + reference * 0.5
    np.testing.assert_allclose(np.asarray(x), reference, rtol=1e-4, atol=1e-5)


@check
def linalg():
    # Custom calls into jaxlib's LAPACK kernels, which the workers register from their
    # --python's jaxlib.
    jax, jnp = jax_modules()
    import jax.scipy.linalg as jsl
    rng = np.random.RandomState(0)
    a = rng.randn(6, 6).astype(np.float32)
    spd = a @ a.T + 6 * np.eye(6, dtype=np.float32)
    b = rng.randn(6, 2).astype(np.float32)
    tol = dict(rtol=1e-3, atol=1e-4)
    on_both(jnp.linalg.solve, spd, b, **tol)
    on_both(jnp.linalg.inv, spd, **tol)
    on_both(jnp.linalg.cholesky, spd, **tol)
    on_both(lambda m: jnp.linalg.eigh(m)[0], spd, **tol)
    on_both(lambda m: jnp.linalg.svd(m, compute_uv=False), a, **tol)
    on_both(lambda m: jnp.abs(jnp.linalg.qr(m)[1]), a, **tol)
    on_both(jnp.linalg.det, spd, rtol=1e-3)
    on_both(lambda m, v: jnp.linalg.lstsq(m, v)[0], a, b, **tol)
    on_both(lambda m: jnp.sort(jnp.abs(jnp.linalg.eigvals(m))), a, **tol)
    on_both(lambda m, v: jsl.solve_triangular(m, v, lower=True), np.tril(spd), b, **tol)
    on_both(lambda m: jsl.lu(m)[2], a, **tol)
    on_both(lambda m: jnp.linalg.solve(m, m), rng.randn(3, 6, 6).astype(np.float32), **tol)


def _on_device(device, fn):
    import jax
    with jax.default_device(device):
        return fn()


@check
def training_libraries():
    # What a training script uses besides jit: flax (linen and nnx) with optax, a small
    # transformer block on a 2x2 mesh, orbax, multihost_utils, make_array_from_callback.
    # Each runs through the proxy and on the local CPU, and must agree.
    jax, jnp = jax_modules()
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    proxy, cpu = jax.devices()[0], jax.devices("cpu")[0]
    rng = np.random.RandomState(0)
    xs = rng.randn(16, 8).astype(np.float32)
    ys = rng.randn(16, 2).astype(np.float32)

    # make_array_from_callback over 4 devices.
    mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("data", "model"))
    whole = np.arange(64, dtype=np.float32).reshape(8, 8)
    made = jax.make_array_from_callback(whole.shape, NamedSharding(mesh, P("data", "model")),
                                        lambda index: whole[index])
    np.testing.assert_array_equal(np.asarray(made), whole)
    assert len(made.addressable_shards) == 4

    # multihost_utils in a single-controller process.
    from jax.experimental import multihost_utils
    np.testing.assert_array_equal(multihost_utils.process_allgather(made, tiled=True), whole)
    np.testing.assert_array_equal(np.asarray(multihost_utils.broadcast_one_to_all(whole)), whole)
    multihost_utils.sync_global_devices("switchyard")

    # A transformer block, sharded data x model, against the unsharded local result.
    d, heads = 8, 2
    params = {k: rng.randn(*shape).astype(np.float32) * 0.3 for k, shape in
              {"wq": (d, d), "wk": (d, d), "wv": (d, d), "wo": (d, d), "w1": (d, 16),
               "w2": (16, d)}.items()}
    tokens = rng.randn(4, 6, d).astype(np.float32)

    def block(p, x):
        def split(t):
            return t.reshape(t.shape[0], t.shape[1], heads, d // heads)
        q, k, v = split(x @ p["wq"]), split(x @ p["wk"]), split(x @ p["wv"])
        attn = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d // heads), axis=-1)
        x = x + jnp.einsum("bhqk,bkhd->bqhd", attn, v).reshape(x.shape) @ p["wo"]
        return x + jax.nn.gelu(x @ p["w1"]) @ p["w2"]

    def loss(p, x):
        return jnp.mean(block(p, x) ** 2)

    shard_params = {k: jax.device_put(v, NamedSharding(mesh, P(None, "model")))
                    for k, v in params.items()}
    shard_tokens = jax.device_put(tokens, NamedSharding(mesh, P("data")))
    remote_loss, remote_grads = jax.jit(jax.value_and_grad(loss))(shard_params, shard_tokens)
    local_loss, local_grads = jax.jit(jax.value_and_grad(loss), device=cpu)(params, tokens)
    np.testing.assert_allclose(float(remote_loss), float(local_loss), rtol=1e-5)
    for k in params:
        np.testing.assert_allclose(np.asarray(remote_grads[k]), np.asarray(local_grads[k]),
                                   rtol=1e-4, atol=1e-6)

    # orbax: save a sharded pytree, restore it with its shardings.
    import tempfile

    import orbax.checkpoint as ocp
    with tempfile.TemporaryDirectory() as tmp:
        checkpointer = ocp.StandardCheckpointer()
        checkpointer.save(f"{tmp}/ckpt", shard_params)
        checkpointer.wait_until_finished()
        target = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding),
                              shard_params)
        restored = checkpointer.restore(f"{tmp}/ckpt", target)
        for k in params:
            np.testing.assert_array_equal(np.asarray(restored[k]), params[k])
            assert restored[k].sharding == shard_params[k].sharding

    import optax
    from flax import linen, nnx

    class Linen(linen.Module):
        @linen.compact
        def __call__(self, x):
            return linen.Dense(2)(jax.nn.relu(linen.Dense(16)(x)))

    def train_linen():
        model, opt = Linen(), optax.adam(1e-2)
        variables = model.init(jax.random.key(0), xs)
        state = opt.init(variables)

        @jax.jit
        def step(v, s, x, y):
            value, grads = jax.value_and_grad(
                lambda v: jnp.mean((model.apply(v, x) - y) ** 2))(v)
            updates, s = opt.update(grads, s, v)
            return optax.apply_updates(v, updates), s, value
        losses = []
        for _ in range(5):
            variables, state, value = step(variables, state, xs, ys)
            losses.append(float(value))
        return losses

    np.testing.assert_allclose(_on_device(proxy, train_linen), _on_device(cpu, train_linen),
                               rtol=1e-5)

    def train_nnx():
        model = nnx.Sequential(nnx.Linear(8, 16, rngs=nnx.Rngs(0)), nnx.relu,
                               nnx.Linear(16, 2, rngs=nnx.Rngs(1)))
        optimizer = nnx.Optimizer(model, optax.sgd(0.05), wrt=nnx.Param)

        @nnx.jit
        def step(model, optimizer, x, y):
            value, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
            optimizer.update(model, grads)
            return value
        return [float(step(model, optimizer, xs, ys)) for _ in range(5)]

    np.testing.assert_allclose(_on_device(proxy, train_nnx), _on_device(cpu, train_nnx), rtol=1e-5)


@check
def live_arrays():
    # jax 0.11.2's np.asarray of a proxy array keeps one more array alive (the client
    # asks FullyReplicatedShard and DisassembleIntoSingleDeviceArrays, destructs one and
    # keeps the other with the array): jax.live_arrays() shows it until the array goes,
    # then nothing is left, on the client nor on the server.
    import gc
    jax, _ = jax_modules()
    gc.collect()
    baseline = len(jax.live_arrays())
    x = jax.device_put(np.arange(6, dtype=np.float32), jax.devices()[1])
    np.testing.assert_array_equal(np.asarray(x), np.arange(6))
    assert len(jax.live_arrays()) - baseline in (1, 2), jax.live_arrays()
    del x
    gc.collect()
    assert len(jax.live_arrays()) == baseline, jax.live_arrays()


@check
def introspection():
    jax, jnp = jax_modules()
    a = np.ones((64, 32), np.float32)
    fn = lambda x, y: jnp.tanh(x @ y.T).sum(axis=0)  # noqa: E731
    remote = jax.jit(fn).lower(a, a).compile()
    local = jax.jit(fn, device=jax.devices("cpu")[0]).lower(a, a).compile()
    stats, expected = remote.memory_analysis(), local.memory_analysis()
    assert stats is not None
    for field in ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
                  "temp_size_in_bytes"):
        assert getattr(stats, field) == getattr(expected, field), (field, stats, expected)
    # Cost analysis and text come from the worker's jaxlib (the CPU plugin has neither).
    costs, local_costs = remote.cost_analysis(), local.cost_analysis()
    assert costs is not None and costs["flops"] == local_costs["flops"], (costs, local_costs)
    assert costs["bytes accessed"] == local_costs["bytes accessed"], (costs, local_costs)
    text, local_text = remote.as_text(), local.as_text()
    assert text is not None and text.startswith("HloModule"), text
    # The same module and entry layout (local JAX prints more config and debug names).
    assert local_text.splitlines()[0].startswith(text.splitlines()[0]), (text[:300],
                                                                         local_text[:300])
    assert "tanh" in text, text


def _callback_refused(jax):
    # jaxlib's proxy client refuses host callbacks itself, at compile time.
    try:
        jax.jit(lambda x: jax.pure_callback(np.sin, jax.ShapeDtypeStruct((), np.float32), x))(
            np.float32(1)).block_until_ready()
    except Exception as e:  # noqa: BLE001
        assert "host callback" in str(e), e
        return
    raise AssertionError("host callbacks unexpectedly worked without switchyard.initialize()")


@switchyard_check(_callback_refused)
def host_callbacks():
    import contextlib
    import io

    jax, jnp = jax_modules()
    from jax.experimental import io_callback
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    # pure_callback inside a program, compared with local JAX.
    on_both(lambda v: jax.pure_callback(lambda a: np.tanh(a) * 3,
                                        jax.ShapeDtypeStruct(v.shape, v.dtype), v) + v, x)
    # Several operands and results of several dtypes.
    def many(a, b, c):
        return a.astype(np.int32) + 1, (b * 2).astype(b.dtype), ~c
    specs = (jax.ShapeDtypeStruct((4,), jnp.int32), jax.ShapeDtypeStruct((2, 2), jnp.bfloat16),
             jax.ShapeDtypeStruct((3,), jnp.bool_))
    on_both(lambda a, b, c: jax.pure_callback(many, specs, a, b, c), np.arange(4, dtype=np.int8),
            np.ones((2, 2), jnp.bfloat16), np.array([True, False, True]))
    # vmap over a callback (one call per element, sequentially).
    on_both(jax.vmap(lambda v: jax.pure_callback(lambda a: a * a,
                                                 jax.ShapeDtypeStruct((4,), v.dtype), v,
                                                 vmap_method="sequential")), x)
    # debug.print inside a jitted loop prints every iteration, in order.
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        total = jax.jit(lambda: jax.lax.fori_loop(
            0, 25, lambda i, c: (jax.debug.print("step {i} carry {c}", i=i, c=c), c + i)[1], 0))()
        jax.block_until_ready(total)
        jax.effects_barrier()
    assert int(total) == sum(range(25)), total
    expected = [f"step {i} carry {sum(range(i))}" for i in range(25)]
    assert out.getvalue().splitlines() == expected, out.getvalue()
    # Ordered io_callback: side effects in program order across launches.
    seen = []
    def record(v):
        seen.append(int(v))
        return np.int32(int(v) * 3)
    io_fn = jax.jit(lambda v: io_callback(record, jax.ShapeDtypeStruct((), jnp.int32), v,
                                          ordered=True))
    results = [int(io_fn(jnp.int32(i))) for i in range(6)]
    jax.effects_barrier()
    assert results == [i * 3 for i in range(6)] and seen == list(range(6)), (results, seen)
    # debug.callback on a sharded array: one call per shard.
    devs = jax.devices()[:4]
    mesh = jax.sharding.Mesh(np.array(devs), ("x",))
    sharded = jax.device_put(np.arange(8, dtype=np.float32),
                             jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x")))
    shards = []
    def record_shards(v):
        jax.debug.callback(lambda s: shards.append(np.asarray(s).copy()), v)
        return v * 2

    jax.jit(record_shards)(sharded).block_until_ready()
    jax.effects_barrier()
    assert sorted(np.concatenate([np.ravel(s) for s in shards]).tolist()) == list(range(8)) or \
        any(np.array_equal(np.ravel(s), np.arange(8)) for s in shards), shards
    # A callback that raises fails its launch with the Python traceback; the session goes on.
    def boom(a):
        raise ValueError("boom from the client")
    try:
        jax.jit(lambda v: jax.pure_callback(boom, jax.ShapeDtypeStruct((), jnp.float32), v))(
            jnp.float32(1)).block_until_ready()
        raise AssertionError("a raising callback did not fail its launch")
    except Exception as e:  # noqa: BLE001
        assert "boom from the client" in str(e) and "ValueError" in str(e), e
    # Returning the wrong shape is the user's error, with JAX's own message.
    try:
        jax.jit(lambda v: jax.pure_callback(lambda a: np.zeros(3, np.float32),
                                            jax.ShapeDtypeStruct((2,), jnp.float32), v))(
            jnp.zeros(2)).block_until_ready()
        raise AssertionError("a wrong-shape result was accepted")
    except Exception as e:  # noqa: BLE001
        assert "shape" in str(e), e
    on_both(lambda v: v * 3, x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--init", choices=["pathwaysutils", "switchyard"], required=True)
    parser.add_argument("--suite", choices=["default", "multislice"], default="default")
    parser.add_argument("checks", nargs="*")
    args = parser.parse_args()
    import jax
    jax.config.update("jax_platforms", "proxy,cpu")
    if args.init == "pathwaysutils":
        import pathwaysutils
        pathwaysutils.initialize()
    else:
        import switchyard
        switchyard.initialize()
    registry = MULTISLICE if args.suite == "multislice" else CHECKS
    for name in args.checks or list(registry):
        if args.init == "pathwaysutils" and name in SWITCHYARD_ONLY:
            SWITCHYARD_ONLY[name](jax)
        else:
            registry[name]()
        print(f"PASS {name}", flush=True)
    # As switchyard.shutdown(), which the second client's venv (no switchyard) lacks.
    import gc
    jax.clear_caches()
    gc.collect()
    jax.extend.backend.clear_backends()


if __name__ == "__main__":
    import jax.extend.backend  # noqa: F401
    sys.exit(main())
