"""One Orbax checkpoint save and restore through Switchyard's persistence API, for
bench/run.py: prints RESULT {json} with the seconds each took.

    python checkpoint_cases.py DIR MIB

The state (MIB MiB of f32, half on each of 2 slices of 4 devices) is made on the
workers by programs, so no byte of it passes through the client; the environment gives
JAX_BACKEND_TARGET.
"""

import json
import os
import sys
import time

import numpy as np


def main():
    directory, mib = sys.argv[1], int(sys.argv[2])
    os.environ["ENABLE_PATHWAYS_PERSISTENCE"] = "1"
    import switchyard
    switchyard.initialize()
    import jax
    import jax.numpy as jnp
    import orbax.checkpoint as ocp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    devices = jax.devices()
    rows = mib * (1 << 20) // 4 // 1024 // 4  # four arrays of [rows, 1024] f32
    state, shardings = {}, {}
    for s in range(2):
        mesh = Mesh(np.array(devices[4 * s:4 * s + 4]).reshape(4, 1), ("x", "y"))
        sharding = NamedSharding(mesh, P("x", None))
        for k in range(2):
            name = f"slice{s}_{k}"
            state[name] = jax.jit(lambda v=s * 2 + k: jnp.full((rows, 1024), v, jnp.float32),
                                  out_shardings=sharding)()
            shardings[name] = sharding
    jax.block_until_ready(state)
    path = os.path.join(directory, "checkpoint")
    checkpointer = ocp.StandardCheckpointer()
    started = time.perf_counter()
    checkpointer.save(path, state)
    checkpointer.wait_until_finished()
    save_s = time.perf_counter() - started
    print("SAVED", flush=True)
    sys.stdin.readline()  # the runner reads the proxy's counters between the two
    target = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=shardings[k])
              for k, v in state.items()}
    started = time.perf_counter()
    restored = checkpointer.restore(path, target)
    jax.block_until_ready(restored)
    restore_s = time.perf_counter() - started
    assert float(restored["slice1_1"][0, 0]) == 3.0
    print("RESULT " + json.dumps({"bytes": 4 * rows * 1024 * 4, "save_s": save_s,
                                  "restore_s": restore_s}), flush=True)
    switchyard.shutdown()


if __name__ == "__main__":
    sys.exit(main())
