"""Host-memory snapshots for elastic training: keep a copy of the training state in
the pinned host memory of every slice, and restore it onto whichever slices are
active after one is lost (or returns), without touching disk.

Made for data parallelism across slices as it runs on any PJRT device (MPMD on CPU:
one replica of the state per slice, see `switchyard.mean_across_slices`). With
`pathwaysutils.elastic`:

    snapshot = switchyard.elastic.Snapshot()

    @manager.elastic_retry(minimum_slice_count=2)
    def train():
        shardings = [...one pytree of shardings per active slice...]
        state = snapshot.restore(shardings) if snapshot.step is not None else init(shardings)
        for step in ...:
            state = train_step(state)
            if step % 10 == 0:
                snapshot.save(step, state)  # returns at once; copies run on the workers

Orbax's Pathways Snapshotter (`ocp.v1.training.pathways.Snapshotter`) does the same
for one state array with a replica axis and works through Switchyard too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _is_slice_down(error: Exception) -> bool:
    return "DATA_LOSS" in str(error)


class Snapshot:
    """The latest complete copy of a state, one replica per slice, in pinned host memory.

    `save` is asynchronous: the copies are issued and it returns. A save becomes the
    snapshot once all its copies have finished (checked at the next `save` or
    `restore`); until then the previous one stays, so a failure during a save loses
    at most the steps since the previous snapshot.
    """

    def __init__(self, memory_kind: str = "pinned_host"):
        self._memory_kind = memory_kind
        self._latest: tuple[int, list[Any]] | None = None
        self._pending: tuple[int, list[Any]] | None = None

    @property
    def step(self) -> int | None:
        """The step of the newest snapshot, counting one still being copied."""
        newest = self._pending or self._latest
        return None if newest is None else newest[0]

    def save(self, step: int, replicas: Sequence[Any]) -> None:
        """Copies `replicas` (pytrees of the same values, usually one per slice) to host
        memory on their own devices."""
        import jax

        self._settle()
        copies = [jax.tree_util.tree_map(
            lambda x: jax.device_put(x, x.sharding.with_memory_kind(self._memory_kind)), replica)
            for replica in replicas]
        self._pending = (step, copies)

    def wait(self) -> None:
        """Waits until the last save is complete (or has failed)."""
        self._settle()

    def restore(self, shardings: Sequence[Any]) -> list[Any]:
        """The state, from a replica that survived, put onto each pytree of shardings.

        Raises RuntimeError if there is no snapshot or no replica of it survived.
        """
        import jax

        self._settle()
        if self._latest is None:
            raise RuntimeError("no complete snapshot to restore")
        step, copies = self._latest
        source = None
        for replica in copies:
            try:
                jax.block_until_ready(replica)
            except jax.errors.JaxRuntimeError as e:
                if not _is_slice_down(e):
                    raise
                continue
            source = replica
            break
        if source is None:
            raise RuntimeError(f"every replica of the snapshot of step {step} was lost")
        out = [jax.tree_util.tree_map(lambda x, s: jax.device_put(x, s), source, target)
               for target in shardings]
        # Keep the snapshot whole for the next failure: the restored state's slices
        # hold it now, so copy it back to their host memory.
        self._latest = None
        self.save(step, out)
        return out

    def _settle(self) -> None:
        """Makes the pending save the snapshot, with the replicas whose copies completed
        (by the next save they long have; waiting costs nothing then)."""
        import jax

        if self._pending is None:
            return
        step, copies = self._pending
        self._pending = None
        survivors = []
        for replica in copies:
            try:
                jax.block_until_ready(replica)
                survivors.append(replica)
            except jax.errors.JaxRuntimeError as e:
                if not _is_slice_down(e):
                    raise
        if survivors:
            self._latest = (step, survivors)
