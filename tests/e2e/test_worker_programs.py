"""Real JAX programs, lowered at test time by the pinned jax, compiled and run on
each worker of a real rm + 2-worker cluster, checked against numpy."""

import grpc
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import switchyard
from switchyard import common_pb2, worker_pb2

rng = np.random.default_rng(7)


@pytest.fixture
def workers(start_worker):
    procs = [start_worker(0), start_worker(1)]
    clients = [switchyard.WorkerClient(p.address) for p in procs]
    yield clients
    for c in clients:
        c.close()


PROGRAMS = [
    ("elementwise", lambda x, y: jnp.sin(x) * y + 1.0,
     lambda x, y: np.sin(x) * y + 1.0,
     [rng.normal(size=(3, 5)).astype(np.float32), rng.normal(size=(3, 5)).astype(np.float32)]),
    ("matmul", lambda a, b: a @ b, lambda a, b: a @ b,
     [rng.normal(size=(16, 32)).astype(np.float32), rng.normal(size=(32, 8)).astype(np.float32)]),
    ("reductions", lambda x: (x.sum(axis=0), x.max(), jnp.mean(x, axis=1)),
     lambda x: (x.sum(axis=0), x.max(), np.mean(x, axis=1)),
     [rng.normal(size=(6, 7)).astype(np.float32)]),
    ("integers", lambda a, b: (a * b + 3) // 2, lambda a, b: (a * b + 3) // 2,
     [rng.integers(-100, 100, size=(10,), dtype=np.int32),
      rng.integers(-100, 100, size=(10,), dtype=np.int32)]),
    ("grad", jax.grad(lambda w, x: jnp.sum(jnp.tanh(x @ w) ** 2)),
     None, [rng.normal(size=(4, 2)).astype(np.float32),
            rng.normal(size=(3, 4)).astype(np.float32)]),
    ("while_loop", lambda n: jax.lax.fori_loop(0, n, lambda i, acc: acc + i, 0),
     lambda n: sum(range(int(n))), [np.int32(10)]),
]


@pytest.mark.parametrize("name,fn,reference,args", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_program_on_every_worker_matches(workers, name, fn, reference, args):
    expected = jax.tree_util.tree_leaves(
        reference(*args) if reference else jax.jit(fn)(*args))
    for worker in workers:
        program = switchyard.lower_portable(
            fn, *args, target=worker.info().plugin.stablehlo_current_version)
        assert program.code.startswith(b"ML\xefR")  # a portable artifact
        for device in (worker.device_ids()[0], worker.device_ids()[-1]):
            outputs = worker.run(program, *args, device_id=device)
            assert len(outputs) == len(expected)
            for got, want in zip(outputs, expected):
                np.testing.assert_allclose(got, np.asarray(want), rtol=1e-5, atol=1e-5)
        assert worker.stats().buffers == 0


def test_devices_are_global_and_distinct(workers):
    ids = [w.device_ids() for w in workers]
    assert len(ids[0]) == len(ids[1]) == 4
    assert set(ids[0]).isdisjoint(ids[1])
    info = workers[1].info()
    assert info.registered and info.slice_index == 1
    assert info.plugin.platform_name == "cpu"
    assert info.plugin.stablehlo_current_version.count(".") == 2


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16,
                                   np.int8, np.uint8, np.int32, np.int64, np.bool_,
                                   np.complex64])
def test_buffer_round_trip_dtypes(workers, dtype):
    worker = workers[0]
    array = (rng.normal(size=(5, 3)) * 10).astype(dtype)
    buffer_id = worker.put(array, worker.device_ids()[1])
    back = worker.get(buffer_id)
    assert back.dtype == array.dtype and back.shape == array.shape
    np.testing.assert_array_equal(back, array)
    assert worker.delete([buffer_id]) == []


@pytest.mark.parametrize("shape", [(), (0,), (0, 4), (3 * (1 << 20) + 17,)])
def test_buffer_round_trip_shapes_and_chunks(workers, shape):
    # The last shape is ~12 MiB: three full 4 MiB chunks and a partial one.
    worker = workers[1]
    array = rng.normal(size=shape).astype(np.float32)
    buffer_id = worker.put(array, worker.device_ids()[0])
    np.testing.assert_array_equal(worker.get(buffer_id), array)
    worker.delete([buffer_id])


def test_outputs_feed_later_launches_on_device(workers):
    worker = workers[0]
    device = worker.device_ids()[2]
    x = np.arange(4, dtype=np.float32)
    program = switchyard.lower_portable(lambda v: v * 2.0, x)
    exe, response = worker.compile(program, [device])
    assert list(response.device_ids) == [device]
    current = worker.put(x, device)
    for _ in range(5):
        [[current]] = worker.execute(exe, [[current]], 1)  # no wait: chained on the device
    np.testing.assert_array_equal(worker.get(current), x * 32)


def test_bad_requests_get_clear_errors_and_worker_stays_up(workers):
    worker = workers[0]
    device = worker.device_ids()[0]
    other_device = workers[1].device_ids()[0]
    x = np.ones(4, np.float32)

    def code_of(call):
        with pytest.raises(switchyard.WorkerError) as e:
            call()
        return e.value.code, e.value.message

    assert code_of(lambda: worker.get(123456789))[0] == grpc.StatusCode.NOT_FOUND
    assert code_of(lambda: worker.execute(987654, [[1]], 1))[0] == grpc.StatusCode.NOT_FOUND
    code, message = code_of(lambda: worker.put(x, other_device))
    assert code == grpc.StatusCode.NOT_FOUND and "not on this worker" in message
    bad = switchyard.Program(code=b"\x00garbage, not a program", compile_options=b"",
                             target="1.0.0", num_outputs=1)
    code, message = code_of(lambda: worker.compile(bad, [device]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "could not compile" in message
    good = switchyard.lower_portable(lambda v: v + 1, x)
    broken_options = switchyard.Program(code=good.code, compile_options=b"\xff\xff\xff",
                                        target=good.target, num_outputs=1)
    assert code_of(lambda: worker.compile(broken_options, [device]))[0] == \
        grpc.StatusCode.INVALID_ARGUMENT
    # Header that lies about the size, a stream that stops short, an unknown dtype.
    header = worker_pb2.BufferHeader(buffer_id=worker.new_id(), device_id=device,
                                     dtype=common_pb2.F32, dims=[4], size_bytes=15)
    assert code_of(lambda: worker.put_chunks(header, [b"x" * 15]))[0] == \
        grpc.StatusCode.INVALID_ARGUMENT
    header.size_bytes = 16
    code, message = code_of(lambda: worker.put_chunks(header, [b"x" * 8]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "ended after 8 of 16" in message
    assert code_of(lambda: worker.put_chunks(header, [b"x" * 8, b"x" * 16]))[0] == \
        grpc.StatusCode.INVALID_ARGUMENT
    header.dtype = 99  # type: ignore[assignment]  # no such dtype, on purpose
    assert code_of(lambda: worker.put_chunks(header, [b"x" * 16]))[0] == \
        grpc.StatusCode.INVALID_ARGUMENT
    # Wrong number of arguments for a compiled program.
    exe, _ = worker.compile(good, [device])
    assert code_of(lambda: worker.execute(exe, [[], []], 1))[0] == \
        grpc.StatusCode.INVALID_ARGUMENT
    assert worker.delete([424242]) == [424242]
    # Still serving, and nothing leaked.
    np.testing.assert_array_equal(worker.run(good, x, device_id=device)[0], x + 1)
    worker.delete_executables([exe])
    assert worker.stats().buffers == 0


def test_buffers_go_to_the_memory_kind_asked_for(workers):
    worker = workers[0]
    device = worker.device_ids()[0]
    for kind in ("pinned_host", "unpinned_host", ""):
        header = worker_pb2.BufferHeader(buffer_id=worker.new_id(), device_id=device,
                                         dtype=common_pb2.F32, dims=[2], size_bytes=8,
                                         memory_kind=kind)
        worker.put_chunks(header, [b"\x00" * 8])
        [first] = list(worker._stub.GetBuffer(
            worker_pb2.GetBufferRequest(buffer_id=header.buffer_id)))
        assert first.header.memory_kind == (kind or "device")
        worker.delete([header.buffer_id])
    bad = worker_pb2.BufferHeader(buffer_id=worker.new_id(), device_id=device,
                                  dtype=common_pb2.F32, dims=[2], size_bytes=8,
                                  memory_kind="hbm_on_the_moon")
    with pytest.raises(switchyard.WorkerError) as e:
        worker.put_chunks(bad, [b"\x00" * 8])
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "no memory of kind" in e.value.message
