"""Plugin programs (pathwaysutils' persistence, reshard; unknown programs) through a
Switchyard proxy with a stock client, pathwaysutils initialized.

    python plugin_programs_client.py DIR [CHECK ...]    (pathwaysutils.initialize())
    python plugin_programs_client.py DIR --switchyard   (a profile, switchyard.initialize())

DIR is a scratch directory the workers can write. The environment gives
JAX_BACKEND_TARGET. Expects 2 slices of 4 devices.
"""

import datetime
import os
import sys
from collections.abc import Callable

import numpy as np

CHECKS: dict[str, Callable[..., None]] = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def mesh(devices, shape, axes=("x", "y")):
    from jax.sharding import Mesh
    return Mesh(np.array(devices).reshape(shape), axes)


@check
def persistence_round_trip_every_dtype(directory):
    import jax
    import ml_dtypes
    from jax.sharding import NamedSharding, PartitionSpec as P
    from pathwaysutils.persistence import helper
    devices = jax.devices()
    source = NamedSharding(mesh(devices[:4], (2, 2)), P("x", "y"))
    # Uneven in the target (6 rows over 4 devices is not allowed; 8 over 4 is).
    target = NamedSharding(mesh(devices[4:], (4, 1)), P("x"))
    timeout = datetime.timedelta(seconds=60)
    dtypes = [np.float32, np.float64, ml_dtypes.bfloat16, np.int8, np.int16, np.int32, np.int64,
              np.uint8, np.uint16, np.uint32, np.uint64]
    values = [(np.arange(32) * 3 % 17).astype(d).reshape(8, 4) for d in dtypes]
    arrays = [jax.device_put(v, source) for v in values]
    names = [f"a{i}" for i in range(len(values))]
    helper.write_arrays(directory, names, arrays, timeout).result()
    read, done = helper.read_arrays(directory, names, [np.dtype(d) for d in dtypes],
                                    [(8, 4)] * len(values), [target] * len(values),
                                    target.mesh.devices, timeout)
    done.result()
    for got, want in zip(read, values):
        assert got.sharding == target and got.dtype == want.dtype
        np.testing.assert_array_equal(np.asarray(got), want)


@check
def a_failed_write_fails_the_save_with_the_reason(directory):
    import jax
    from pathwaysutils.persistence import helper
    x = jax.device_put(np.ones((4,), np.float32), jax.devices()[0])
    missing = os.path.join(directory, "no", "such", "dir")
    try:
        helper.write_arrays(missing, ["x"], [x], datetime.timedelta(seconds=30)).result()
    except Exception as e:  # noqa: BLE001 - the client raises its runtime error
        assert "is not a directory" in str(e) and missing in str(e), e
    else:
        raise AssertionError("a write to a missing directory succeeded")
    # The session goes on.
    np.testing.assert_array_equal(np.asarray(x + 1), np.full((4,), 2, np.float32))


@check
def reading_what_is_not_there_says_so(directory):
    import jax
    from jax.sharding import SingleDeviceSharding
    from pathwaysutils.persistence import helper
    device = jax.devices()[0]
    arrays, done = helper.read_arrays(directory, ["never_written"], [np.dtype(np.float32)], [(4,)],
                                      [SingleDeviceSharding(device)], [device],
                                      datetime.timedelta(seconds=30))
    try:
        done.result()
    except Exception as e:  # noqa: BLE001
        assert "no array is stored" in str(e), e
    else:
        raise AssertionError("reading a missing array succeeded")
    # A shape that is not the one stored.
    x = jax.device_put(np.ones((4,), np.float32), device)
    helper.write_arrays(directory, ["four"], [x], datetime.timedelta(seconds=30)).result()
    arrays, done = helper.read_arrays(directory, ["four"], [np.dtype(np.float32)], [(5,)],
                                      [SingleDeviceSharding(device)], [device],
                                      datetime.timedelta(seconds=30))
    try:
        done.result()
    except Exception as e:  # noqa: BLE001
        assert "F32[4]" in str(e) and "F32[5]" in str(e), e
    else:
        raise AssertionError("reading with the wrong shape succeeded")


@check
def a_write_that_names_another_shape_is_refused(directory):
    import jax
    from pathwaysutils import plugin_executable
    from pathwaysutils.persistence import helper
    x = jax.device_put(np.ones((4,), np.float32), jax.devices()[0])
    request = helper.get_write_request(directory, "x", x, datetime.timedelta(seconds=30),
                                       return_dict=True)
    request["persistenceWriteRequest"]["shape"] = [5]
    executable = plugin_executable.PluginExecutable(__import__("json").dumps(request))
    try:
        executable.call([x])[1].result()
    except Exception as e:  # noqa: BLE001
        assert "has shape [4], the write names [5]" in str(e), e
    else:
        raise AssertionError("a write naming another shape succeeded")
    np.testing.assert_array_equal(np.asarray(x * 2), np.full((4,), 2, np.float32))


@check
def an_unknown_plugin_program_is_a_bad_plugin_program(directory):
    from pathwaysutils import plugin_executable
    for program in ['{"somethingNew": {}}', "not json"]:
        try:
            plugin_executable.PluginExecutable(program)
        except Exception as e:  # noqa: BLE001
            assert "Bad PluginProgram" in str(e), e
        else:
            raise AssertionError(f"{program!r} compiled")


@check
def side_channel_reshard_matches_pathwaysutils_reshard(directory):
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P
    from pathwaysutils import reshard as ifrt
    from pathwaysutils.experimental import reshard as experimental
    devices = jax.devices()
    tree = {"w": np.arange(64, dtype=np.float32).reshape(8, 8),
            "b": np.arange(8, dtype=np.int32)}
    source = {"w": NamedSharding(mesh(devices[:4], (2, 2)), P("x", "y")),
              "b": NamedSharding(mesh(devices[:4], (2, 2)), P("x"))}
    placed = jax.device_put(tree, source)
    dest = {"w": NamedSharding(mesh(devices[4:], (1, 4)), P(None, "y")),
            "b": NamedSharding(mesh(devices[4:], (4, 1)), P())}
    ours = experimental.reshard(placed, dest)
    theirs = ifrt.reshard(placed, dest)  # the IFRT reshard (ReshardArrays)
    for key in tree:
        assert ours[key].sharding == dest[key], (ours[key].sharding, dest[key])
        np.testing.assert_array_equal(np.asarray(ours[key]), np.asarray(theirs[key]))
        np.testing.assert_array_equal(np.asarray(ours[key]), tree[key])
    donated = experimental.reshard(jax.device_put(tree, source), dest, donate=True)
    np.testing.assert_array_equal(np.asarray(donated["w"]), tree["w"])


def read_trace(directory):
    """The one trace file under DIR/plugins/profile/<run>/, parsed."""
    import glob
    import gzip
    import json
    files = glob.glob(os.path.join(directory, "plugins", "profile", "*",
                                   "switchyard.trace.json.gz"))
    assert len(files) == 1, files
    with gzip.open(files[0], "rt") as f:
        return json.load(f)


def check_trace(trace):
    """A row per process: the proxy and each worker, whose launches are on device rows."""
    events = trace["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert sorted(n.split(" (")[0] for n in names.values()) == ["proxy", "worker s0h0",
                                                               "worker s1h0"], names
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("name") == "thread_name"}
    spans = [e for e in events if e.get("ph") == "X"]
    for pid, name in names.items():
        mine = [e for e in spans if e["pid"] == pid]
        if name == "proxy":
            assert any(e["cat"] == "request" and e["name"] == "loaded_executable_execute_request"
                       for e in mine), mine[:5]
        else:
            launches = [e for e in mine if e["cat"] == "launch"]
            assert launches, (name, mine[:5])
            assert all(threads[(pid, e["tid"])].startswith("device ") for e in launches)
            assert all(e["dur"] >= 0 for e in launches)


def train_steps():
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P
    devices = jax.devices()
    step = jax.jit(lambda w, x: w - 0.1 * jnp.tanh(x @ w))
    for s in range(2):
        sharding = NamedSharding(mesh(devices[4 * s:4 * s + 4], (4, 1)), P("x"))
        w = jax.device_put(np.eye(64, dtype=np.float32), sharding)
        for _ in range(3):
            w = step(w, w)
        w.block_until_ready()


@check
def a_profile_taken_with_pathwaysutils_has_a_row_per_process(directory):
    from pathwaysutils import profiling
    root = os.environ["SWITCHYARD_TEST_MOUNT_ROOT"]  # the cluster's --storage_mount_root
    os.makedirs(os.path.join(root, "bucket", "profiles"), exist_ok=True)
    # The client's own trace would go to GCS, which cannot be reached here: only the
    # servers' part (the plugin program) is taken.
    profiling._original_start_trace = lambda *args, **kwargs: None
    profiling._original_stop_trace = lambda *args, **kwargs: None
    profiling.start_trace("gs://bucket/profiles")
    train_steps()
    profiling.stop_trace()
    check_trace(read_trace(os.path.join(root, "bucket", "profiles")))


def profile_with_switchyard_initialize(directory):
    """jax.profiler.trace to a local directory, switchyard.initialize() (run alone: a
    process has one backend initialization)."""
    import glob

    import jax
    log_dir = os.path.join(directory, "tensorboard")
    with jax.profiler.trace(log_dir):
        train_steps()
    check_trace(read_trace(log_dir))
    # JAX's own trace of the client, beside it.
    assert glob.glob(os.path.join(log_dir, "plugins", "profile", "*", "*.xplane.pb")), log_dir


def main():
    directory = sys.argv[1]
    import jax
    jax.config.update("jax_platforms", "proxy,cpu")
    jax.config.update("jax_enable_x64", True)  # 64-bit element types stay 64-bit
    if sys.argv[2:] == ["--switchyard"]:
        import switchyard
        switchyard.initialize()
        profile_with_switchyard_initialize(directory)
        print("PASS profile_with_switchyard_initialize", flush=True)
    else:
        import pathwaysutils
        pathwaysutils.initialize()
        for name in sys.argv[2:] or list(CHECKS):
            CHECKS[name](directory)
            print(f"PASS {name}", flush=True)
    import gc
    jax.clear_caches()
    gc.collect()
    import jax.extend.backend
    jax.extend.backend.clear_backends()


if __name__ == "__main__":
    sys.exit(main())
