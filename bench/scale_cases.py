"""The client of the scale section (bench/scale.py): one session over a fleet of simulated
hosts. Says `STOP_SIMS` and `CONT_SIMS` around an issue timed with the simulated hosts
stopped, and `PAUSE` once it holds a lane to every host (the harness then samples the
processes); each time it waits for the harness's answer. Then it kills one process of
simulated hosts and times DATA_LOSS.
Ends with `RESULT {json}`."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time


def said(word: str) -> None:
    """Tells the harness `word` and waits until it has acted on it."""
    print(word, flush=True)
    sys.stdin.readline()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--kill_pid", type=int, required=True)
    parser.add_argument("--kill_slice", type=int, required=True)
    args = parser.parse_args()

    import jax
    import numpy as np

    import switchyard

    switchyard.initialize()
    r: dict[str, float] = {}
    start = time.monotonic()
    devices = jax.devices()
    r["session_s"] = time.monotonic() - start
    r["devices"] = len(devices)
    f = jax.jit(lambda x: x * 2 + 1)
    x = np.ones(8, np.float32)
    inputs = [jax.device_put(x, d) for d in devices]
    jax.block_until_ready(inputs)

    start = time.monotonic()
    compiled = [f.lower(a).compile() for a in inputs]
    r["compile_s"] = time.monotonic() - start

    issue, complete = [], []
    for _ in range(args.steps):  # one program on every host, waited for
        start = time.monotonic()
        outs = [c(a) for c, a in zip(compiled, inputs)]
        issue.append(time.monotonic() - start)
        jax.block_until_ready(outs)
        complete.append(time.monotonic() - start)
    r["issue_s"] = sorted(issue)[len(issue) // 2]
    r["complete_s"] = sorted(complete)[len(complete) // 2]
    # The same issue with the simulated hosts stopped (SIGSTOP by the harness): on real
    # hosts their CPU is other machines', and on two cores it is most of what the client
    # and the proxy wait for. Their sockets take the launches meanwhile.
    alone = []
    for _ in range(args.steps):
        said("STOP_SIMS")
        start = time.monotonic()
        outs = [c(a) for c, a in zip(compiled, inputs)]
        alone.append(time.monotonic() - start)
        said("CONT_SIMS")
        jax.block_until_ready(outs)
    r["issue_alone_s"] = sorted(alone)[len(alone) // 2]
    start = time.monotonic()
    for _ in range(args.steps):  # the same, pipelined
        outs = [c(a) for c, a in zip(compiled, inputs)]
    jax.block_until_ready(outs)
    r["launches_per_s"] = args.steps * len(devices) / (time.monotonic() - start)

    said("PAUSE")

    victim = next(i for i, d in enumerate(devices) if d.slice_index == args.kill_slice)
    killed = time.monotonic()
    os.kill(args.kill_pid, signal.SIGKILL)
    r["data_loss_s"] = -1.0
    while time.monotonic() - killed < 30:
        try:
            np.asarray(compiled[victim](inputs[victim]))
        except jax.errors.JaxRuntimeError as e:
            if "DATA_LOSS" in str(e):
                r["data_loss_s"] = time.monotonic() - killed
                break
            raise
    print("RESULT " + json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
