"""The frameworks users bring, unmodified, from their own venv (./dev setup makes
.venv-tunix): Tunix's GRPO with its trainer on one slice and its sampler on another,
through a real local cluster, compared step for step with the same run on JAX's CPU,
and resumed from its checkpoint after its sampler's slice is killed."""

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
