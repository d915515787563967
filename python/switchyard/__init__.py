"""Switchyard: a single-controller runtime for JAX.

`initialize()` points JAX at a Switchyard proxy (`JAX_PLATFORMS=proxy`);
`LocalCluster` starts a local fleet (`switchyard up`); `elastic.Snapshot` keeps training
state in host memory to go on after a slice is lost; `WorkerClient` speaks a
worker's own API directly; `lower_portable` turns a jitted function into what a
worker compiles.
"""

from switchyard import elastic
from switchyard.backend import initialize, shutdown
from switchyard.cluster import LocalCluster, find_binary, find_plugin
from switchyard.multislice import mean_across_slices, num_slices, slice_devices
from switchyard.programs import Program, lower_portable
from switchyard.worker_client import WorkerClient, WorkerError

__all__ = [
    "elastic",
    "initialize",
    "LocalCluster",
    "Program",
    "WorkerClient",
    "WorkerError",
    "find_binary",
    "find_plugin",
    "lower_portable",
    "mean_across_slices",
    "num_slices",
    "shutdown",
    "slice_devices",
]
