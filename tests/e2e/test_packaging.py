"""The client as a user installs it: the wheel in a venv of its own (.venv-wheel, made by
`./dev setup` with jax 0.10 on Python 3.11) and the binary from `cmake --install`, with
nothing from the checkout on either path."""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

from switchyard.cluster import find_plugin

ROOT = pathlib.Path(__file__).resolve().parents[2]
WHEEL_PYTHON = ROOT / ".venv-wheel" / "bin" / "python"

PROGRAM = """
import os, sys
import numpy as np
import switchyard
assert switchyard.__file__.startswith(sys.prefix), switchyard.__file__
assert switchyard.find_binary() == os.environ["EXPECTED_BINARY"], switchyard.find_binary()
with switchyard.LocalCluster(workers=2, devices_per_worker=2) as cluster:
    switchyard.initialize(cluster.target)
    import jax, jax.numpy as jnp
    assert len(jax.devices()) == 4, jax.devices()
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    got = jax.jit(lambda a: jnp.tanh(a @ a.T).sum(axis=0))(x)
    np.testing.assert_allclose(np.asarray(got), np.tanh(x @ x.T).sum(axis=0), rtol=1e-5)
    switchyard.shutdown()
print("PACKAGED CLIENT OK", jax.__version__)
"""


@pytest.fixture(scope="module")
def installed_binary(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("prefix")
    subprocess.run(["cmake", "--install", str(ROOT / "build"), "--prefix", str(prefix),
                    "--strip"], check=True, capture_output=True, text=True)
    binary = prefix / "bin" / "switchyard"
    assert os.access(binary, os.X_OK)
    return binary


def test_wheel_and_installed_binary_run_a_program(installed_binary, tmp_path):
    if not WHEEL_PYTHON.exists():
        pytest.fail(".venv-wheel is missing: run ./dev setup")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "SWITCHYARD_BIN") and not k.startswith("JAX_")}
    env.update(PATH=f"{installed_binary.parent}:/usr/bin:/bin",
               EXPECTED_BINARY=str(installed_binary),
               SWITCHYARD_PJRT_PLUGIN=find_plugin())
    # cwd outside the checkout: `import switchyard` must come from the installed wheel.
    result = subprocess.run([str(WHEEL_PYTHON), "-c", PROGRAM], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PACKAGED CLIENT OK 0.10.2" in result.stdout


def test_installed_binary_answers_help(installed_binary):
    out = subprocess.run([str(installed_binary), "worker", "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert "--resource_manager_address" in out
