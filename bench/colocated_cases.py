"""Colocated Python through Switchyard, for bench/run.py: prints RESULT {json}.

    python colocated_cases.py loader MIB STEPS   # per step: a batch of MIB MiB per host
    python colocated_cases.py handoff MIB REPS   # an identity function on MIB MiB

loader: a colocated class on each of the 2 hosts (slices) makes its host's part of the
batch and a jitted step per slice reduces it; prints READY, waits for a line on stdin (the
runner reads the proxy's byte counters around the timed steps), then runs STEPS steps.
handoff: one array on one device through an identity function (worker -> sidecar ->
worker, through the shared-memory directory), against numpy copying the same bytes in
this process. The environment gives JAX_BACKEND_TARGET.
"""

import json
import sys
import time

import numpy as np


class Loader:
    def __init__(self, rows):
        self.rows = rows
        self.step = 0

    def next(self, like):
        import jax
        import numpy as np
        self.step += 1
        shape = (self.rows * len(like.sharding.device_set), 1024)
        local = np.full((self.rows * len(like.addressable_shards), 1024), self.step, np.float32)
        return jax.make_array_from_process_local_data(like.sharding, local, shape)


def main():
    mode, mib, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    import switchyard
    switchyard.initialize()
    import jax
    import jax.numpy as jnp
    from jax.experimental import colocated_python as cp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    cpu = cp.colocated_cpu_devices(jax.devices())
    if mode == "loader":
        # A loader per slice (a program spans one worker on CPU): each makes its host's
        # part of every batch, and a step per slice reduces it where it is.
        loaders = []
        for s in range(2):
            devices = cpu[2 * s:2 * s + 2]
            sharding = NamedSharding(Mesh(np.array(devices), ("x",)), P("x"))
            rows = mib * (1 << 20) // 4 // 1024 // len(devices)
            like = jax.device_put(np.zeros(len(devices), np.float32), sharding)
            out_spec = jax.ShapeDtypeStruct((rows * len(devices), 1024), jnp.float32,
                                            sharding=sharding)
            # colocated_python_class is typed as returning type[object]; it is Loader's
            # wrapper, which takes Loader's arguments and has its methods.
            loader = cp.colocated_python_class(Loader)(rows)  # type: ignore[call-arg]
            next_batch = loader.next.specialize(  # type: ignore[attr-defined]
                out_specs_fn=lambda like, o=out_spec: o)
            k = len(devices)
            reduce = jax.jit(lambda b, k=k: b.reshape(k, -1).sum(axis=1),
                             out_shardings=sharding)
            loaders.append((loader, next_batch, reduce, like))

        def step():
            return [reduce(next_batch(like)) for _, next_batch, reduce, like in loaders]

        for _ in range(2):
            jax.block_until_ready(step())
        print("READY", flush=True)
        sys.stdin.readline()
        started = time.perf_counter()
        for _ in range(count):
            total = step()
        jax.block_until_ready(total)
        seconds = time.perf_counter() - started
        print("RESULT " + json.dumps({"steps": count, "seconds": seconds,
                                      "batch_bytes": 2 * mib * (1 << 20)}), flush=True)
    else:
        elements = mib * (1 << 20) // 4
        host = np.arange(elements, dtype=np.float32)
        x = jax.device_put(host, cpu[0])

        @cp.colocated_python
        def identity(v):
            return v

        identity = identity.specialize(out_specs_fn=lambda v: v)
        started = time.perf_counter()
        jax.block_until_ready(identity(x))  # starts the sidecar
        first_call_s = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(count):
            y = identity(x)
            jax.block_until_ready(y)
        handoff_s = (time.perf_counter() - started) / count
        assert float(y[elements - 1]) == float(host[-1])
        target = np.empty_like(host)
        np.copyto(target, host)  # its pages in, as the hand-off's files' are
        started = time.perf_counter()
        for _ in range(count):
            np.copyto(target, host)
        memcpy_s = (time.perf_counter() - started) / count
        print("RESULT " + json.dumps({"bytes": host.nbytes, "handoff_s": handoff_s,
                                      "memcpy_s": memcpy_s, "first_call_s": first_call_s}),
              flush=True)
    switchyard.shutdown()


if __name__ == "__main__":
    main()
