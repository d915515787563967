"""A client for the chaos test: trains data-parallel over the slices that are up for
`--seconds`, and survives what the test does to the cluster meanwhile. A step that
touches a lost slice fails with DATA_LOSS (that slice is left out until a health check
passes again); a lost proxy fails the session with UNAVAILABLE (the client connects
again). Any other error is recorded, and the test fails on it. One JSON line per step;
the last one sums up."""

from __future__ import annotations

import argparse
import json
import re
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--name", default="client")
    args = parser.parse_args()

    import jax
    import jax.extend.backend
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import switchyard

    switchyard.initialize()
    counts = {"ok": 0, "data_loss": 0, "unavailable": 0, "reconnects": 0}
    others: list[str] = []
    start = time.monotonic()
    rng = np.random.default_rng(abs(hash(args.name)) % 2**32)

    def say(**kw):
        print(json.dumps({"client": args.name, "t": round(time.monotonic() - start, 2), **kw}),
              flush=True)

    def connect():
        """(slices -> devices), with a new session if the old one is gone."""
        deadline = time.monotonic() + 60
        while True:
            try:
                devices = jax.devices()
                break
            except Exception as e:  # the proxy restarting: try again
                if time.monotonic() > deadline:
                    raise
                say(waiting=str(e)[:120])
                time.sleep(0.5)
        slices: dict[int, list] = {}
        for d in devices:
            slices.setdefault(d.slice_index, []).append(d)
        return slices

    def loss_fn(w, x, y):
        return jax.numpy.mean((x @ w - y) ** 2)

    grad = jax.jit(jax.value_and_grad(loss_fn))
    update = jax.jit(lambda w, g: w - 0.1 * g)
    slices = connect()
    down: dict[int, float] = {}  # slice -> when it was seen down
    true_w = rng.normal(size=(8, 1)).astype(np.float32)
    host_w = np.zeros((8, 1), np.float32)  # the weights after the last good step
    weights = None  # per active slice
    active: list[int] = []
    while time.monotonic() - start < args.seconds:
        # Slices seen down are tried again every second.
        want = sorted(s for s in slices if s not in down or time.monotonic() - down[s] > 1.0)
        try:
            if want != active or weights is None:
                active = want
                meshes = {s: Mesh(np.array(slices[s]), ("batch",)) for s in active}
                weights = [jax.device_put(host_w, NamedSharding(meshes[s], P())) for s in active]
            x = rng.normal(size=(16 * len(active), 8)).astype(np.float32)
            y = x @ true_w
            parts = np.split(np.arange(len(x)), len(active))
            shardings = [NamedSharding(meshes[s], P("batch")) for s in active]
            results = [grad(w, jax.device_put(x[i], sh), jax.device_put(y[i], sh))
                       for w, i, sh in zip(weights, parts, shardings)]
            grads = switchyard.mean_across_slices([g for _, g in results])
            weights = [update(w, g) for w, g in zip(weights, grads)]
            loss = float(np.mean([float(loss) for loss, _ in results]))
            host_w = np.asarray(weights[0])
            counts["ok"] += 1
            for s in active:
                down.pop(s, None)
            say(step=counts["ok"], loss=round(loss, 5), slices=len(active))
        except jax.errors.JaxRuntimeError as e:
            message = str(e)
            weights = None  # rebuilt from the host copy below (or from scratch)
            if "DATA_LOSS" in message:
                counts["data_loss"] += 1
                for s in re.findall(r"slice (\d+)", message):
                    down[int(s)] = time.monotonic()
                say(data_loss=message[:160])
            elif "UNAVAILABLE" in message or "CANCELLED" in message:
                counts["unavailable"] += 1
                say(unavailable=message[:160])
                jax.clear_caches()
                jax.extend.backend.clear_backends()
                grad = jax.jit(jax.value_and_grad(loss_fn))
                update = jax.jit(lambda w, g: w - 0.1 * g)
                slices = connect()
                down.clear()
                counts["reconnects"] += 1
            else:
                others.append(message[:300])
                say(other=message[:300])
            time.sleep(0.2)
    weights = None
    say(done=True, counts=counts, others=others)
    switchyard.shutdown()


if __name__ == "__main__":
    main()
