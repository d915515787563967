"""Profiles of the Switchyard servers through jax.profiler, for clients that use
`switchyard.initialize()`: `jax.profiler.start_trace(log_dir)` / `stop_trace()` and
`jax.profiler.trace(log_dir)` also record what the proxy and every worker of the session
did (requests, launches on each device, queue waits, transfers, checkpoint I/O), and
the proxy writes it to `<log_dir>/plugins/profile/<run>/switchyard.trace.json.gz`,
beside JAX's own trace of the client. TensorBoard's profile plugin and Perfetto open it.
`log_dir` is a directory on the proxy's host (shared storage), or gs://, s3:// under its
--storage_mount_root. pathwaysutils' start_trace does the same with gs:// paths.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading

_lock = threading.Lock()
_executable = None  # the server-side profile being taken
_original: dict = {}


def _run(executable) -> None:
    """One run of the profile program (the first starts it, the next stops it)."""
    from jax.interpreters import pxla
    results = executable.execute_sharded([], with_tokens=True)
    results.consume_with_handlers(pxla.global_avals_to_results_handler([], [], True).handlers)
    results.consume_token().block_until_ready()


def start_trace(log_dir, *args, **kwargs):
    global _executable
    import jax
    from jax.extend import ifrt_programs
    log_dir = str(log_dir)
    with _lock:
        if _executable is not None:
            raise RuntimeError("start_trace called while a trace is already being taken")
        if "://" not in log_dir:
            os.makedirs(log_dir, exist_ok=True)
        programs = ifrt_programs.ifrt_programs
        request = {"profileRequest": {"traceLocation": os.path.abspath(log_dir)
                                      if "://" not in log_dir else log_dir,
                                      "maxNumHosts": 1, "includeResourceManagers": True}}
        executable = jax.devices()[0].client.compile_ifrt_program(
            programs.make_plugin_program(json.dumps(request)),
            programs.make_plugin_compile_options())
        _run(executable)
        _executable = executable
    try:
        return _original["start_trace"](log_dir, *args, **kwargs)
    except Exception:
        _stop_servers()
        raise


def _stop_servers() -> None:
    global _executable
    with _lock:
        executable, _executable = _executable, None
        if executable is None:
            raise RuntimeError("stop_trace called before a trace is being taken")
        _run(executable)


def stop_trace():
    try:
        _stop_servers()
    finally:
        profile = _original["stop_trace"]()
    return profile


@contextlib.contextmanager
def trace(log_dir, *args, **kwargs):
    start_trace(log_dir, *args, **kwargs)
    try:
        yield
    finally:
        stop_trace()


def install() -> None:
    """Patches jax.profiler's start_trace, stop_trace and trace (once)."""
    import jax
    import jax._src.profiler as jax_profiler
    if _original:
        return
    _original["start_trace"] = jax_profiler.start_trace
    _original["stop_trace"] = jax_profiler.stop_trace
    for module in (jax.profiler, jax_profiler):
        for name, function in (("start_trace", start_trace), ("stop_trace", stop_trace),
                               ("trace", trace)):
            setattr(module, name, function)
