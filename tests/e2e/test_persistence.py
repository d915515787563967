"""Pathways' plugin programs with stock clients against a real local cluster (rm + 2
workers x 4 CPU devices + proxy): Orbax checkpoints written and read by the workers
themselves (ENABLE_PATHWAYS_PERSISTENCE=1), pathwaysutils' persistence helpers, the
side-channel reshard, profiles of the proxy and the workers (pathwaysutils' start_trace
to a gs:// bucket under --storage_mount_root; jax.profiler.trace to a local directory),
and what goes wrong (a missing directory, a missing array, a program the server does not
know)."""

import os
import pathlib
import subprocess
import sys

import pytest

import switchyard

HERE = pathlib.Path(__file__).parent


@pytest.fixture(scope="module")
def mount_root(tmp_path_factory):
    """Where the cluster finds gs:// buckets (as a gcsfuse mount would be)."""
    return tmp_path_factory.mktemp("buckets")


@pytest.fixture(scope="module")
def cluster(mount_root):
    with switchyard.LocalCluster(workers=2, devices_per_worker=4,
                                 flags=(f"--storage_mount_root={mount_root}",)) as c:
        yield c


def run(cluster, script, *args, timeout=600):
    env = {**os.environ, "JAX_BACKEND_TARGET": cluster.target,
           "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS": "true",
           "SWITCHYARD_TEST_MOUNT_ROOT": cluster.flags[0].split("=", 1)[1]}
    return subprocess.run([sys.executable, str(HERE / script), *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("init", ["pathwaysutils", "switchyard"])
def test_an_orbax_checkpoint_is_saved_and_restored_by_the_workers(cluster, init, tmp_path):
    result = run(cluster, "checkpoint_client.py", "--init", init, str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    for check in ["same_mesh", "other_mesh", "fewer_slices", "train_step"]:
        assert f"PASS {check}" in result.stdout, result.stdout
    # The files are zarr arrays any tensorstore reader opens.
    read = subprocess.run([sys.executable, str(HERE / "tensorstore_read.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert read.returncode == 0 and "PASS tensorstore_read" in read.stdout, read.stderr[-4000:]


def test_plugin_programs(cluster, tmp_path):
    from plugin_programs_client import CHECKS
    result = run(cluster, "plugin_programs_client.py", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    for check in CHECKS:
        assert f"PASS {check}" in result.stdout, result.stdout


def test_a_profile_with_switchyard_initialize_and_a_local_directory(cluster, tmp_path):
    result = run(cluster, "plugin_programs_client.py", str(tmp_path), "--switchyard")
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    assert "PASS profile_with_switchyard_initialize" in result.stdout, result.stdout
