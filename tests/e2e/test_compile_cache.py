"""The persistent compilation cache (--gcs_scratch_location) with real processes: a
restarted and resized fleet loads what an earlier one compiled, a second client hits,
a plugin change misses and says why, a corrupt entry is replaced, a location that cannot
be used is a clear error, and `switchyard cache` lists, sums and prunes."""

import os
import shutil
import subprocess
import sys

import pytest

import switchyard
from conftest import proxy_address, start_rm

# Compiles one program per device it is given and checks it against JAX's CPU backend.
CLIENT = r"""
import os
import sys
import numpy as np
import jax
import jax.numpy as jnp
jax.config.update("jax_platforms", "proxy,cpu")
import switchyard
switchyard.initialize()

PROGRAM = int(os.environ.get("PROGRAM", "0"))  # another number, another program

def f(x):
    for i in range(8):
        x = jnp.tanh(x @ x.T + i + PROGRAM) * 0.5
    return x.sum()

x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
want = jax.jit(f, device=jax.devices("cpu")[0])(x)
for index in map(int, sys.argv[1:]):
    got = jax.jit(f)(jax.device_put(x, jax.devices()[index]))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5)
print("OK", flush=True)
"""


def run_client(address: str, *devices: int, program: int = 0):
    env = {**os.environ, "JAX_BACKEND_TARGET": f"grpc://{address}", "PROGRAM": str(program)}
    result = subprocess.run([sys.executable, "-c", CLIENT, *map(str, devices)], env=env,
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]


@pytest.fixture
def scratch(tmp_path):
    return tmp_path / "scratch"


def start_fleet(spawn, plugin, scratch, slices=(0,), plugin_args=(), prefix=None):
    """A fresh fleet (its own RM) whose workers keep their programs under `scratch`:
    a restarted fleet, possibly of another size."""
    scratch.mkdir(exist_ok=True)
    rm = start_rm(spawn, f"--gcs_scratch_location={scratch}")
    workers = []
    for s in slices:
        worker = spawn("worker", f"--resource_manager_address={rm.address}",
                       "--server_port=0", f"--slice_index={s}", f"--pjrt_plugin={plugin}",
                       "--cpu_device_count=4", f"--gcs_scratch_location={scratch}", *plugin_args,
                       prefix=prefix)
        worker.wait_for("registered with the resource manager")
        workers.append(worker)
    proxy = spawn("proxy", "--server_port=0",
                  f"--resource_manager_address={rm.address}",
                  f"--gcs_scratch_location={scratch}")
    proxy.wait_for(f"slice {slices[-1]} host 0")
    workers[0].others = [rm, proxy]
    return workers, proxy, proxy_address(proxy)


def stop(*workers):
    for worker in workers:
        for other in getattr(worker, "others", []):
            other.stop()
        worker.stop()


def cache(scratch, *args):
    return subprocess.run([switchyard.find_binary(), "cache", *args,
                           f"--gcs_scratch_location={scratch}"],
                          capture_output=True, text=True, timeout=60)


def entries(scratch):
    return sorted((scratch / "switchyard" / "compilation_cache").glob("*.sycc"))


def test_a_restarted_and_resized_fleet_and_a_second_client_load_what_was_compiled(
        spawn, plugin, scratch):
    workers, proxy, port = start_fleet(spawn, plugin, scratch, slices=(0, 1))
    run_client(port, 0)
    assert "compilation cache in" in workers[0].output
    assert "compilation cache hit" not in workers[0].output
    assert len(entries(scratch)) == 1
    # The same program on the other slice's first device: the same key (its device
    # assignment in the plugin's own ids), so the other worker loads it.
    run_client(port, 4)
    assert "compilation cache hit for" in workers[1].output
    stop(*workers)

    # A new fleet of one worker (a restart with another size), and a new client.
    [worker], proxy, port = start_fleet(spawn, plugin, scratch, slices=(2,))
    run_client(port, 0)
    worker.wait_for("compilation cache hit for", timeout=5)
    assert len(entries(scratch)) == 1
    # A second client process of the same fleet: the worker loads it again (the first
    # client's executable was freed with its session).
    run_client(port, 0)
    assert worker.output.count("compilation cache hit for") == 2

    listed = cache(scratch, "ls")
    assert listed.returncode == 0, listed.stderr
    assert "jit_f" in listed.stdout and "cpu" in listed.stdout, listed.stdout
    stats = cache(scratch, "stats")
    assert "entries: 1" in stats.stdout, stats.stdout
    pruned = cache(scratch, "prune", "--compilation_cache_max_bytes=0")
    assert pruned.returncode == 0 and "removed 1 files" in pruned.stdout, pruned.stdout
    assert entries(scratch) == []


def test_a_plugin_change_misses_and_says_why(spawn, plugin, scratch, tmp_path):
    [worker], proxy, port = start_fleet(spawn, plugin, scratch)
    run_client(port, 0)
    stop(worker)
    # Another build of the plugin: the same library with a byte more at its end.
    other = tmp_path / "other_plugin.so"
    shutil.copyfile(plugin, other)
    with open(other, "ab") as f:
        f.write(b"\0")
    [worker], proxy, port = start_fleet(spawn, plugin, scratch, slices=(1,),
                                        plugin_args=(f"--pjrt_plugin={other}",))
    run_client(port, 0)
    assert "compilation cache hit" not in worker.output
    line = worker.wait_for("compilation cache miss for", timeout=5)
    assert "differ in the plugin" in line and "another build" in line, line
    assert len(entries(scratch)) == 2  # one per plugin build


def test_a_corrupt_entry_is_replaced_and_the_program_still_runs(spawn, plugin, scratch):
    [worker], proxy, port = start_fleet(spawn, plugin, scratch)
    run_client(port, 0)
    stop(worker)
    [entry] = entries(scratch)
    data = bytearray(entry.read_bytes())
    data[-100] ^= 0xFF
    entry.write_bytes(bytes(data))
    [worker], proxy, port = start_fleet(spawn, plugin, scratch, slices=(1,))
    run_client(port, 0)
    worker.wait_for("ignoring and removing", timeout=5)
    assert "checksum" in worker.output
    stop(worker)
    [worker], proxy, port = start_fleet(spawn, plugin, scratch, slices=(2,))
    run_client(port, 0)
    worker.wait_for("compilation cache hit for", timeout=5)


def test_a_cache_that_cannot_be_made_leaves_workers_compiling(spawn, plugin, scratch):
    scratch.mkdir()
    (scratch / "switchyard").write_text("a file where the cache's directory would be")
    [worker], proxy, port = start_fleet(spawn, plugin, scratch)
    run_client(port, 0)
    assert "no compilation cache (every program is compiled)" in worker.output


def read_only(directory) -> list[str]:
    """A command prefix that runs its command with `directory` mounted read-only."""
    script = (f"mount --bind {directory} {directory} && "
              f"mount -o remount,ro,bind {directory} {directory} && exec \"$@\"")
    return ["unshare", "-m", "sh", "-c", script, "read-only"]


def can_mount_read_only(tmp_path) -> bool:
    probe = tmp_path / "probe"
    probe.mkdir()
    return subprocess.run([*read_only(probe), "true"], capture_output=True).returncode == 0


def test_a_read_only_cache_serves_hits_and_stores_nothing(spawn, plugin, scratch, tmp_path):
    if not can_mount_read_only(tmp_path):
        pytest.skip("needs mount namespaces (unshare -m) to make a read-only mount")
    [worker], proxy, port = start_fleet(spawn, plugin, scratch)
    run_client(port, 0)
    stop(worker)
    assert len(entries(scratch)) == 1
    [worker], proxy, port = start_fleet(spawn, plugin, scratch, slices=(1,),
                                        prefix=read_only(scratch))
    assert "is read-only here" in worker.output
    run_client(port, 0)
    worker.wait_for("compilation cache hit for", timeout=5)
    run_client(port, 0, program=1)  # a new program: compiled, not stored
    assert len(entries(scratch)) == 1


def test_two_fleets_compiling_one_program_into_one_directory(spawn, plugin, scratch):
    first, _, first_port = start_fleet(spawn, plugin, scratch, slices=(0,))
    second, _, second_port = start_fleet(spawn, plugin, scratch, slices=(0,))
    env = [{**os.environ, "JAX_BACKEND_TARGET": f"grpc://{address}", "PROGRAM": "2"}
           for address in (first_port, second_port)]
    clients = [subprocess.Popen([sys.executable, "-c", CLIENT, "0"], env=e, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for e in env]
    for client in clients:
        out, err = client.communicate(timeout=180)
        assert client.returncode == 0 and "OK" in out, err[-3000:]
    assert len(entries(scratch)) == 1  # one whole entry, whoever renamed last
    assert not list((scratch / "switchyard" / "compilation_cache").glob("*.tmp.*"))
    stop(*first, *second)
    [worker], _, port = start_fleet(spawn, plugin, scratch, slices=(0,))
    run_client(port, 0, program=2)
    worker.wait_for("compilation cache hit for", timeout=5)


@pytest.mark.parametrize("command", ["worker", "up"])
def test_an_unmounted_bucket_is_a_clear_error(command, plugin, tmp_path):
    args = [switchyard.find_binary(), command, "--gcs_scratch_location=gs://team-bucket/scratch",
            f"--storage_mount_root={tmp_path}", f"--pjrt_plugin={plugin}", "--server_port=0"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert f"gcsfuse team-bucket {tmp_path}/team-bucket" in result.stderr, result.stderr
    no_root = subprocess.run(args[:3] + args[4:], capture_output=True, text=True, timeout=60)
    assert no_root.returncode == 2 and "--storage_mount_root" in no_root.stderr, no_root.stderr


# One thread compiles a model that takes over a second; another moves arrays meanwhile.
CONCURRENT = r"""
import json, threading, time
import numpy as np
import jax
import jax.numpy as jnp
jax.config.update("jax_platforms", "proxy,cpu")
import switchyard
switchyard.initialize()

def f(x):
    for i in range(80):
        x = jnp.tanh(x @ x.T * (1.0 / (i + 1)) + i)
        x = jnp.where(x > 0, jnp.sin(x), jnp.cos(x)) * (i % 7 + 1)
        x = jnp.roll(x, i % 5, axis=0)
    return x.sum()

x = np.ones((32, 32), np.float32)
lowered = jax.jit(f).lower(x)
np.asarray(jax.device_put(x))  # the session is open and warm
times = {}
def compile_it():
    times["start"] = time.monotonic()
    lowered.compile()
    times["end"] = time.monotonic()
thread = threading.Thread(target=compile_it)
thread.start()
done = []
while thread.is_alive():
    np.testing.assert_array_equal(np.asarray(jax.device_put(x + len(done))), x + len(done))
    done.append(time.monotonic())
thread.join()
print(json.dumps({"start": times["start"], "end": times["end"], "done": done}), flush=True)
"""


def test_a_long_compile_does_not_hold_up_the_clients_other_requests(spawn, plugin, scratch):
    import json

    [worker], proxy, port = start_fleet(spawn, plugin, scratch)
    env = {**os.environ, "JAX_BACKEND_TARGET": f"grpc://{port}"}
    result = subprocess.run([sys.executable, "-c", CONCURRENT], env=env, capture_output=True,
                            text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    times = json.loads(result.stdout.splitlines()[-1])
    # Round trips finished while the compile ran (on the session's request loop they
    # would all wait for it; the first quarter second lets the compile request get there).
    during = [t for t in times["done"] if times["start"] + 0.25 < t < times["end"]]
    assert times["end"] - times["start"] > 0.5, times  # it was a long compile
    assert len(during) >= 3, (len(during), times["end"] - times["start"])
