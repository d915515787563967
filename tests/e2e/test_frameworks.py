"""The frameworks users bring, unmodified, from their own venv (./dev setup makes
.venv-tunix): Tunix's GRPO with its trainer on one slice and its sampler on another,
through a real local cluster, compared step for step with the same run on JAX's CPU,
and resumed from its checkpoint after its sampler's slice is killed; MaxText's own
pre-training (./dev setup makes .venv-maxtext), checkpointed and restored."""

import json
import os
import pathlib
import signal
import subprocess
import threading

import pytest

import switchyard
from conftest import read_line, worker_buffers

ROOT = pathlib.Path(__file__).parents[2]
TUNIX_PYTHON = ROOT / ".venv-tunix" / "bin" / "python"


@pytest.fixture(scope="module")
def cluster():
    with switchyard.LocalCluster(workers=2, devices_per_worker=2) as c:
        yield c


def test_tunix_grpo_across_slices_matches_local_jax(cluster):
    assert TUNIX_PYTHON.exists(), "run ./dev setup: the Tunix venv (.venv-tunix) is missing"
    env = {**os.environ, "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS": "true"}
    result = subprocess.run([str(TUNIX_PYTHON), str(ROOT / "examples" / "rl_grpo.py"),
                             "--target", cluster.target, "--steps", "3"],
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "rewards and loss match local JAX step for step" in result.stdout
    assert result.stdout.count("reward sum") == 3
    # The trainer's and the sampler's weights went with the client's session.
    assert worker_buffers(cluster) == 0


MEMORY_KINDS = """
import numpy as np, switchyard
switchyard.initialize()
import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from tunix.rl import reshard
meshes = [Mesh(np.array(switchyard.slice_devices(s)).reshape(-1, 1), ("fsdp", "tp"))
          for s in (0, 1)]
weights = {"a": jax.device_put(np.arange(64, dtype=np.float32).reshape(8, 8),
                               NamedSharding(meshes[0], P("fsdp"))),
           "b": jax.device_put(np.ones((4, 6), np.float32), NamedSharding(meshes[0], P()))}
to_host = {"a": NamedSharding(meshes[1], P("fsdp"), memory_kind="pinned_host"),
           "b": NamedSharding(meshes[1], P(None, "fsdp"), memory_kind="pinned_host")}
for move in (jax.device_put, reshard.reshard_pytree):
    host = move(weights, to_host)
    back = move(host, jax.tree.map(lambda w: w.sharding, weights))
    for name, w in weights.items():
        assert host[name].sharding.memory_kind == "pinned_host", host[name].sharding
        assert back[name].sharding.memory_kind == "device", back[name].sharding
        np.testing.assert_array_equal(np.asarray(host[name]), np.asarray(w))
        np.testing.assert_array_equal(np.asarray(back[name]), np.asarray(w))
print("OK")
"""


def test_tunix_reshards_weights_to_pinned_host_memory_of_another_slice(cluster):
    """Tunix's reshard_pytree (and device_put) from device memory on slice 0 to
    `pinned_host` on slice 1, resharded on the way, and back: exact values."""
    assert TUNIX_PYTHON.exists(), "run ./dev setup: the Tunix venv (.venv-tunix) is missing"
    result = subprocess.run([str(TUNIX_PYTHON), "-c", MEMORY_KINDS],
                            env={**os.environ, **cluster.env()}, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-4000:]


def test_tunix_grpo_resumes_after_its_sampler_slice_is_killed():
    """kill -9 of the sampler's worker mid-run: the client gets DATA_LOSS, waits for the
    slice to come back (`up` restarts the worker) and resumes from Tunix's last checkpoint;
    the trainer's state was never lost, so the resumed steps and the trained parameters
    match the same resume on local JAX."""
    assert TUNIX_PYTHON.exists(), "run ./dev setup: the Tunix venv (.venv-tunix) is missing"
    with switchyard.LocalCluster(workers=2, devices_per_worker=2) as cluster:
        env = {**os.environ, "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS": "true"}
        proc = subprocess.Popen([str(TUNIX_PYTHON), str(ROOT / "examples" / "rl_grpo.py"),
                                 "--target", cluster.target, "--steps", "6", "--resume"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        watchdog = threading.Timer(600, proc.kill)  # no wait without a bound
        watchdog.start()
        try:
            seen: list[str] = []
            while not (line := read_line(proc)).startswith("global step 2 done"):
                assert line, "the run ended before step 2: " + "".join(seen)
                seen.append(line)
            os.kill(cluster.child_pid("worker", 1), signal.SIGKILL)
            out, err = proc.communicate()
        finally:
            watchdog.cancel()
            proc.kill()
    assert proc.returncode == 0, out[-2000:] + err[-4000:]
    assert "lost a slice (DATA_LOSS" in out and "resumed at step" in out, out
    assert "so do the trained parameters" in out, out


MAXTEXT_PYTHON = ROOT / ".venv-maxtext" / "bin" / "python"
# A tiny decoder on synthetic data; checkpoints at steps 0, 2 and 4.
MAXTEXT_FLAGS = ["run_name=tiny", "dataset_type=synthetic", "per_device_batch_size=1",
                 "max_target_length=64", "base_emb_dim=64", "base_mlp_dim=128",
                 "base_num_decoder_layers=2", "base_num_query_heads=2", "base_num_kv_heads=2",
                 "head_dim=32", "vocab_size=256", "enable_checkpointing=true",
                 "checkpoint_period=2", "async_checkpointing=false", "hardware=cpu"]


def maxtext_losses(out: pathlib.Path, env: dict, *flags: str) -> dict[int, float]:
    """MaxText's own trainer to step 5, then again to step 8 (it restores its last
    checkpoint, step 4): the loss of each step it ran, from its metrics files."""
    config = subprocess.run([str(MAXTEXT_PYTHON), "-c", "import maxtext, os; print(os.path."
                             "join(os.path.dirname(maxtext.__file__), 'configs', 'base.yml'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    losses = {}
    for steps in (5, 8):
        metrics = out / f"metrics-{steps}.jsonl"
        result = subprocess.run(
            [str(MAXTEXT_PYTHON), "-m", "maxtext.trainers.pre_train.train", config,
             f"base_output_directory={out}", f"steps={steps}", f"metrics_file={metrics}",
             *MAXTEXT_FLAGS, *flags], env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-4000:]
        for line in metrics.read_text().splitlines():
            record = json.loads(line)
            losses[int(record["step"])] = record["learning/loss"]
    assert sorted(os.listdir(out / "tiny" / "checkpoints"))[:3] == ["0", "2", "4"]
    return losses


def test_maxtext_pretrains_checkpoints_and_resumes_matching_local_jax(tmp_path):
    """MaxText pre-training, unmodified, on one slice of 4 devices (SPMD within the
    worker; `enable_single_controller`, so it calls pathwaysutils.initialize() and takes
    the Pathways checkpoint path), checkpointed and restored: the loss of every step
    matches the same two runs on local JAX."""
    assert MAXTEXT_PYTHON.exists(), "run ./dev setup: the MaxText venv (.venv-maxtext) is missing"
    local = maxtext_losses(tmp_path / "local", {
        **os.environ, "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4"},
        "skip_jax_distributed_system=true")
    with switchyard.LocalCluster(workers=1, devices_per_worker=4) as cluster:
        remote = maxtext_losses(tmp_path / "remote", {**os.environ, **cluster.env()},
                                "enable_single_controller=true")
    assert sorted(local) == sorted(remote) == list(range(8)), (local, remote)
    for step, loss in local.items():
        assert abs(remote[step] - loss) <= 1e-5 * abs(loss), (step, remote[step], loss)
