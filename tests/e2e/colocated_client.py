"""jax.experimental.colocated_python through Switchyard with a stock client.

    python colocated_client.py --init pathwaysutils|switchyard DIR

Runs functions in the workers' sidecars and checks what comes back against plain numpy /
JAX on the client's CPU: functions with discovered and with declared output specs,
arrays over both hosts (each host sees its own shards, as process i of 2), a stateful
colocated class, an exception (its traceback reaches the client), a crash of the sidecar
(the call fails, the next works), a call without inputs, string arrays, a colocated
checkpoint writer (each host writes its shards to DIR), arrays of odd sizes and dtypes
through one call, an input a function keeps across calls (the files arrays travel in
are reused), and a function that tries to resize those files. Prints PASS <check> per check.
The environment gives JAX_BACKEND_TARGET.
"""

import argparse
import os
import pathlib
import sys

import numpy as np

CHECKS = ["runs_in_the_sidecar", "discovered_specs", "hosts_see_their_shards",
          "declared_specs", "stateful_class", "exception_traceback", "crash_then_next_call",
          "zero_inputs", "strings", "checkpoint_writer", "odd_arrays_exact",
          "kept_inputs_stay", "files_cannot_be_resized"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--init", choices=["pathwaysutils", "switchyard"], required=True)
    parser.add_argument("directory")
    args = parser.parse_args()
    import jax
    jax.config.update("jax_platforms", "proxy,cpu")
    if args.init == "pathwaysutils":
        import pathwaysutils
        pathwaysutils.initialize()
    else:
        import switchyard
        switchyard.initialize()
    from jax.experimental import colocated_python as cp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    devices = jax.devices()
    cpu = cp.colocated_cpu_devices(devices)
    # On CPU workers the colocated CPU devices are the devices themselves.
    assert list(cpu) == list(devices), (cpu, devices)
    mesh = Mesh(np.array(cpu), ("x",))
    split = NamedSharding(mesh, P("x"))
    n = len(cpu)

    def identity():
        # A sandboxed sidecar is pid 1 of its own PID namespace: its private directory
        # (TMPDIR) tells the processes apart.
        import zlib
        return zlib.crc32(f"{os.getpid()} {os.environ.get('TMPDIR', '')}".encode())

    @cp.colocated_python
    def whoami(x):
        import jax
        import numpy as np
        pieces = [jax.device_put(np.full(s.data.shape, identity(), np.int64), s.device)
                  for s in x.addressable_shards]
        return jax.make_array_from_single_device_arrays(x.shape, x.sharding, pieces)

    jax.config.update("jax_enable_x64", True)
    pids = np.asarray(whoami(jax.device_put(np.zeros(n, np.int64), split)))
    jax.config.update("jax_enable_x64", False)
    assert identity() not in pids and len(set(pids.tolist())) == 2, pids
    print("PASS runs_in_the_sidecar", flush=True)

    @cp.colocated_python
    def add_one(x):
        return x + 1

    one = jax.device_put(np.array(41, np.int32), cpu[0])
    assert int(add_one(one)) == 42
    assert int(add_one(one)) == 42  # the second call runs with the discovered specs
    print("PASS discovered_specs", flush=True)

    @cp.colocated_python
    def tag(x):
        import jax
        import numpy as np
        pieces = [jax.device_put(np.asarray(s.data) * 10 + jax.process_index(), s.device)
                  for s in x.addressable_shards]
        # Per shard, as in multi-controller JAX: the other processes are not there to
        # join a collective (device_put onto a multi-host sharding would wait for them).
        count = jax.make_array_from_callback(
            x.shape, x.sharding, lambda index: np.full(x.shape, jax.process_count(),
                                                       np.float32)[index])
        return jax.make_array_from_single_device_arrays(x.shape, x.sharding, pieces), count

    values = np.arange(n, dtype=np.float32)
    tagged, count = tag(jax.device_put(values, split))
    half = n // 2
    want = values * 10 + np.array([0] * half + [1] * (n - half), np.float32)
    np.testing.assert_array_equal(np.asarray(tagged), want)
    np.testing.assert_array_equal(np.asarray(count), np.full(n, 2, np.float32))
    print("PASS hosts_see_their_shards", flush=True)

    @cp.colocated_python
    def scale(x):
        return x * 3

    scale = scale.specialize(out_specs_fn=lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                                                          sharding=x.sharding))
    local = jax.jit(lambda v: v * 3)(jax.device_put(values, jax.devices("cpu")[0]))
    for _ in range(3):  # asynchronous: no first synchronous run
        np.testing.assert_allclose(np.asarray(scale(jax.device_put(values, split))), local)
    print("PASS declared_specs", flush=True)

    @cp.colocated_python_class
    class Counter:
        def __init__(self, start):
            self.total = start

        def add(self, x):
            import jax
            import numpy as np
            self.total += int(np.asarray(x.addressable_shards[0].data).sum())
            return jax.device_put(np.array(self.total, np.int32), x.sharding)

    counter = Counter(100)
    step = jax.device_put(np.array(5, np.int32), cpu[0])
    assert [int(counter.add(step)) for _ in range(3)] == [105, 110, 115]
    print("PASS stateful_class", flush=True)

    @cp.colocated_python
    def fails(x):
        raise ValueError("no batch for you")

    try:
        jax.block_until_ready(fails(one))
        raise AssertionError("the exception did not reach the client")
    except Exception as e:  # noqa: BLE001
        text = str(e)
        assert "no batch for you" in text and "Traceback" in text and "ValueError" in text, text
    print("PASS exception_traceback", flush=True)

    @cp.colocated_python
    def crash(x):
        import signal
        os.kill(os.getpid(), signal.SIGKILL)

    crash = crash.specialize(out_specs_fn=lambda x: x)
    try:
        jax.block_until_ready(crash(one))
        raise AssertionError("the crash did not reach the client")
    except Exception as e:  # noqa: BLE001
        assert "killed by signal 9" in str(e), str(e)
    assert int(add_one(one)) == 42  # a new sidecar
    print("PASS crash_then_next_call", flush=True)

    target = jax.sharding.SingleDeviceSharding(cpu[1])  # shardings pickle; devices do not

    @cp.colocated_python
    def make():
        import jax
        import numpy as np
        return jax.device_put(np.arange(4, dtype=np.float32), target)

    made = make.specialize(devices=[cpu[1]])()
    np.testing.assert_array_equal(np.asarray(made), np.arange(4, dtype=np.float32))
    print("PASS zero_inputs", flush=True)

    words = np.array(["alpha", "beta"], dtype=np.dtypes.StringDType())

    @cp.colocated_python
    def shout(x):
        import jax
        import numpy as np
        data = np.asarray(x.addressable_shards[0].data)
        return jax.device_put(np.strings.upper(data), x.sharding)

    loud = shout(jax.device_put(words, cpu[2]))
    assert list(np.asarray(loud.addressable_shards[0].data)) == ["ALPHA", "BETA"], loud
    print("PASS strings", flush=True)

    directory = str(pathlib.Path(args.directory) / "colocated_checkpoint")

    @cp.colocated_python
    def write_shards(x):
        import numpy as np
        os.makedirs(directory, exist_ok=True)
        for s in x.addressable_shards:
            start = s.index[0].start or 0
            np.save(os.path.join(directory, f"shard_{start}.npy"), np.asarray(s.data))
        return x

    state = jax.device_put(np.arange(4 * n, dtype=np.float32).reshape(n * 2, 2), split)
    jax.block_until_ready(write_shards(state))
    files = sorted(pathlib.Path(directory).glob("shard_*.npy"),
                   key=lambda p: int(p.stem.split("_")[1]))
    assert len(files) == n, files
    restored = np.concatenate([np.load(f) for f in files])
    np.testing.assert_array_equal(restored, np.asarray(state))
    print("PASS checkpoint_writer", flush=True)

    import ml_dtypes
    odd: tuple[np.ndarray, ...] = (
        np.arange(7, dtype=np.float32).astype(ml_dtypes.bfloat16),
        np.array([True, False, True]), np.zeros((0, 3), np.int8),
        np.array(-5, np.int16), (np.arange(4097) % 251).astype(np.uint8),
        np.arange(3, dtype=np.complex64) * (1 + 2j))

    @cp.colocated_python
    def echo(*xs):
        return xs

    echo = echo.specialize(out_specs_fn=lambda *xs: xs)
    back = echo(*[jax.device_put(a, cpu[3]) for a in odd])
    for sent, array in zip(odd, back):
        got = np.asarray(array)
        assert got.dtype == sent.dtype and got.shape == sent.shape, (sent, got)
        assert got.tobytes() == sent.tobytes(), (sent, got)
    print("PASS odd_arrays_exact", flush=True)

    @cp.colocated_python_class
    class Keeper:
        def __init__(self):
            self.first = None

        def keep(self, x):
            import jax
            import numpy as np
            if self.first is None:
                self.first = x
            return jax.device_put(np.asarray(self.first.addressable_shards[0].data), x.sharding)

    keeper = Keeper()
    size = (1 << 20) + 3  # past a page, as the arrays of the calls around it
    # The class decorator makes its methods colocated functions; mypy sees plain methods.
    keep = keeper.keep.specialize(out_specs_fn=lambda x: x)  # type: ignore[attr-defined]
    first = np.full(size, 1, np.float32)
    np.testing.assert_array_equal(np.asarray(keep(jax.device_put(first, cpu[0]))), first)
    for value in (2, 3):
        kept = keep(jax.device_put(np.full(size, value, np.float32), cpu[0]))
        np.testing.assert_array_equal(np.asarray(kept), first)
    print("PASS kept_inputs_stay", flush=True)

    @cp.colocated_python
    def resize(x):
        import errno

        import jax
        import numpy as np
        tried = refused = 0
        for name in os.listdir("/proc/self/fd"):
            try:
                if not os.readlink(f"/proc/self/fd/{name}").startswith("/memfd:switchyard"):
                    continue
            except OSError:
                continue
            for size in (0, os.fstat(int(name)).st_size * 2):
                tried += 1
                try:
                    os.ftruncate(int(name), size)
                except OSError as e:
                    refused += e.errno == errno.EPERM
        return jax.device_put(np.array([tried, refused], np.int32), x.sharding)

    resize = resize.specialize(out_specs_fn=lambda x: jax.ShapeDtypeStruct(
        (2,), np.int32, sharding=x.sharding))
    tried, refused = np.asarray(resize(jax.device_put(np.ones(1 << 16, np.float32), cpu[0])))
    assert tried >= 4 and refused == tried, (tried, refused)  # the inputs' and outputs' files
    assert int(add_one(one)) == 42  # and the worker is none the worse
    print("PASS files_cannot_be_resized", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
