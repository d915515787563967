"""Simulated hosts (`switchyard up --simulated_hosts N`): the real worker over a plugin with
no device, so that a fleet of hundreds of hosts runs on one machine and the control plane
is tested at that scale. One real worker compiles; every host runs the program; a
killed process of simulated hosts fails exactly its slices with DATA_LOSS, and they come
back when `up` restarts it."""

from __future__ import annotations

import pytest

import switchyard
from test_failures import PRELUDE, run_client

HOSTS = 200
PER_PROCESS = 10


@pytest.fixture(scope="module")
def cluster():
    with switchyard.LocalCluster(
            workers=1, devices_per_worker=1, startup_timeout_s=240,
            flags=(f"--simulated_hosts={HOSTS}",
                   f"--simulated_hosts_per_process={PER_PROCESS}")) as c:
        yield c


EVERY_HOST = PRELUDE + """
devices = jax.devices()
by_slice = {d.slice_index: d for d in devices}
f = jax.jit(lambda x: x * 2 + 1)
x = np.arange(8, dtype=np.float32)
inputs = {s: jax.device_put(x, d) for s, d in by_slice.items()}

def run_everywhere():
    outs = {s: f(a) for s, a in inputs.items()}
    results = {}
    for s, out in outs.items():
        try:
            results[s] = np.asarray(out).tolist()
        except jax.errors.JaxRuntimeError as e:
            results[s] = str(e)
    return results

first = run_everywhere()
# The bytes a simulated host is given are kept: a put, a move between hosts, a fetch.
moved = jax.device_put(jax.device_put(x, by_slice[0]), by_slice[7])
say(devices=len(devices), slices=sorted(by_slice), real=first[0], simulated=first[5],
    kinds=sorted({d.device_kind for d in devices}), put_back=np.asarray(inputs[9]).tolist(),
    moved=np.asarray(moved).tolist())

# Slices 11 to 20 are one process of simulated hosts.
kill("worker", 11)
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    lost = {s for s, r in run_everywhere().items() if isinstance(r, str)}
    if lost:
        break
    time.sleep(0.2)
results = run_everywhere()
say(lost=sorted(s for s, r in results.items() if isinstance(r, str)),
    errors=sorted({r.split(":")[0] for r in results.values() if isinstance(r, str)}),
    sample=results.get(11), ok=sum(not isinstance(r, str) for r in results.values()))

# `up` restarts the process; its hosts come back as the same devices.
deadline = time.monotonic() + 90
while time.monotonic() < deadline:
    inputs = {s: jax.device_put(x, d) for s, d in by_slice.items() if 11 <= s <= 20}
    try:
        back = {s: np.asarray(f(a)).tolist() for s, a in inputs.items()}
        break
    except jax.errors.JaxRuntimeError as e:
        back = str(e)
        time.sleep(0.5)
say(back=back if isinstance(back, str) else sorted(back), same_devices=jax.devices() == devices)
"""


def test_a_program_runs_on_every_host_and_a_killed_process_loses_exactly_its_slices(cluster):
    first, lost, back = run_client(cluster, EVERY_HOST, timeout=400)
    assert first["devices"] == HOSTS + 1
    assert first["slices"] == list(range(HOSTS + 1))
    assert first["kinds"] == ["cpu"]  # ordinary devices to the client
    assert first["real"] == [2.0 * i + 1 for i in range(8)]
    assert first["simulated"] == [0.0] * 8  # launches compute zeros of the real shapes
    assert first["put_back"] == list(range(8)) and first["moved"] == list(range(8))
    assert lost["lost"] == list(range(11, 21)), lost
    assert lost["ok"] == HOSTS + 1 - PER_PROCESS
    assert "DATA_LOSS" in lost["sample"] and "slice 11" in lost["sample"], lost
    assert back["back"] == list(range(11, 21)), back
    assert back["same_devices"] is True
