"""Switchyard: a single-controller runtime for JAX.

`LocalCluster` starts a local fleet (`switchyard up`); `WorkerClient` speaks a
worker's own API (used by tests and examples until a program goes through the
proxy); `lower_portable` turns a jitted function into what a worker compiles.
"""

from switchyard.cluster import LocalCluster, find_binary, find_plugin
from switchyard.programs import Program, lower_portable
from switchyard.worker_client import WorkerClient, WorkerError

__all__ = [
    "LocalCluster",
    "Program",
    "WorkerClient",
    "WorkerError",
    "find_binary",
    "find_plugin",
    "lower_portable",
]
