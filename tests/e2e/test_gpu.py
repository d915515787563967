"""The real GPU path (tests/gpu/check_gpu.py): workers on NVIDIA GPUs with the CUDA PJRT
plugin, a stock JAX client through the proxy; with two GPUs, two hosts forming one NCCL
clique through the resource manager. Skipped without a GPU (CI has none)."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

CHECK = pathlib.Path(__file__).resolve().parents[1] / "gpu" / "check_gpu.py"


def has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    return "GPU " in subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout


@pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")
def test_gpu_checks():
    done = subprocess.run([sys.executable, str(CHECK)], capture_output=True, text=True,
                          timeout=1800, env=os.environ)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    assert "SKIP:" not in done.stdout, done.stdout  # a GPU without the CUDA plugin
