"""One client driving four slices (4 workers x 2 CPU devices): copies and
resharding within and across slices (worker to worker), the pathwaysutils
resharding helpers, the data-parallel helper, 1,000 dependent launches issued
without blocking, and the pipeline and data-parallel examples against local JAX."""

import os
import pathlib
import subprocess
import sys

import pytest

import switchyard
from proxy_client import MULTISLICE

HERE = pathlib.Path(__file__).parent
EXAMPLES = HERE.parents[1] / "examples"


@pytest.fixture(scope="module")
def cluster():
    with switchyard.LocalCluster(workers=4, devices_per_worker=2) as c:
        yield c


def run(cluster, *args, timeout=600):
    env = {**os.environ, **cluster.env()}
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("check", list(MULTISLICE))
def test_multislice_check(cluster, check):
    result = run(cluster, str(HERE / "proxy_client.py"), "--init", "pathwaysutils",
                 "--suite", "multislice", check)
    assert result.returncode == 0 and f"PASS {check}" in result.stdout, result.stderr[-4000:]
    print(result.stdout)


@pytest.mark.parametrize("example", ["pipeline.py", "data_parallel.py"])
def test_example_matches_local_jax(cluster, example):
    result = run(cluster, str(EXAMPLES / example), "--target", cluster.target)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "OK:" in result.stdout
