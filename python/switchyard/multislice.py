"""Helpers for programs that span slices. On CPU a program cannot span workers, so
work across slices is MPMD: a program per slice, and arrays moved between slices
(worker to worker; the client never holds the bytes)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def mean_across_slices(trees: Sequence[Any]) -> list[Any]:
    """All-reduce-mean of per-slice pytrees, e.g. data-parallel gradients.

    `trees[i]` lives on slice i (any sharding within it). Every leaf is moved to the
    first tree's sharding, summed there, divided, and the mean is moved back to each
    tree's own sharding. Returns one pytree per input, in order.
    """
    import jax

    if not trees:
        return []
    flat = [jax.tree_util.tree_flatten(t) for t in trees]
    treedef = flat[0][1]
    for _, other in flat[1:]:
        if other != treedef:  # type: ignore[operator]  # PyTreeDef's stub has no __ne__
            raise ValueError(f"pytrees differ: {treedef} vs {other}")
    home = [leaf.sharding for leaf in flat[0][0]]
    gathered = [[jax.device_put(leaves[k], home[k]) for leaves, _ in flat]
                for k in range(len(home))]
    means = [_mean(*parts) for parts in gathered]
    out = []
    for leaves, _ in flat:
        moved = [jax.device_put(m, leaf.sharding) for m, leaf in zip(means, leaves)]
        out.append(jax.tree_util.tree_unflatten(treedef, moved))
    return out


def _mean(*parts):
    return _mean_fn(len(parts))(*parts)


_MEAN_FNS: dict[int, Callable[..., Any]] = {}


def _mean_fn(n):
    import jax

    if n not in _MEAN_FNS:
        _MEAN_FNS[n] = jax.jit(lambda *xs: sum(xs[1:], xs[0]) / n)
    return _MEAN_FNS[n]


def slice_devices(slice_index: int) -> list:
    """The devices of one slice, in id order."""
    import jax

    return sorted((d for d in jax.devices() if getattr(d, "slice_index", 0) == slice_index),
                  key=lambda d: d.id)


def num_slices() -> int:
    import jax

    return len({getattr(d, "slice_index", 0) for d in jax.devices()})
