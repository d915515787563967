"""The frameworks users bring, unmodified, from their own venv (./dev setup makes
.venv-tunix): Tunix's GRPO with its trainer on one slice and its sampler on another,
through a real local cluster, compared step for step with the same run on JAX's CPU."""

import os
import pathlib
import subprocess

import pytest

import switchyard
from conftest import worker_buffers

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
