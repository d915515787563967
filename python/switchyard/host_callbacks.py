"""Host callbacks through a Switchyard proxy: `jax.debug.print`, `jax.debug.callback`,
`jax.pure_callback` and `io_callback` in programs that run on the workers.

JAX hands a program's callbacks (Python functions) to the backend's compile call, and
jaxlib's proxy client refuses them ("Unsupported host callback type"). `install()`
(which `switchyard.initialize()` calls) takes them out of that call, keeps them here
under a random key that the compile options carry to the workers, and serves the
workers' calls on a stream of Switchyard's own to the proxy
(proto/switchyard/host_callback.proto). Calls run one at a time, in the order they
arrive: what a device calls in order (a loop's `debug.print`s, ordered `io_callback`s)
runs in that order.
"""

from __future__ import annotations

import queue
import secrets
import threading
import traceback
import weakref
from typing import Any

import numpy as np

# The compile option that names a program's key (the workers take it out again).
OPTION = "switchyard_host_callbacks"
_REGISTER_TIMEOUT_S = 30
_MESSAGE_BYTES_MAX = 1 << 30
_INTERNAL = 13
_NOT_FOUND = 5

_lock = threading.Lock()
_servers: dict[str, _Server] = {}


def install() -> None:
    """Makes JAX's compiles for the proxy backend keep host callbacks out of the request."""
    from jax._src import compiler

    original = compiler.backend_compile_and_load
    if getattr(original, "_switchyard", False):
        return

    def backend_compile_and_load(backend, module, executable_devices, options, host_callbacks):
        if not host_callbacks or not str(getattr(backend, "runtime_type", "")).startswith("proxy"):
            return original(backend, module, executable_devices, options, host_callbacks)
        server = _server()
        key = server.register(host_callbacks)
        options.env_option_overrides = [
            *(o for o in options.env_option_overrides if o[0] != OPTION), (OPTION, key)]
        executable = original(backend, module, executable_devices, options, [])
        try:  # the functions live as long as the executable that calls them
            weakref.finalize(executable, server.forget, key)
        except TypeError:
            pass
        return executable

    backend_compile_and_load._switchyard = True  # type: ignore[attr-defined]
    compiler.backend_compile_and_load = backend_compile_and_load


def close() -> None:
    """Ends this process's callback streams (switchyard.shutdown() calls it)."""
    with _lock:
        servers = list(_servers.values())
        _servers.clear()
    for server in servers:
        server.close()


def _server() -> _Server:
    import jax

    target = jax.config.read("jax_backend_target") or ""
    target = target.split("://", 1)[-1]
    if not target:
        raise RuntimeError("no Switchyard proxy address for host callbacks: set JAX_BACKEND_TARGET")
    with _lock:
        server = _servers.get(target)
        if server is None or server.broken:
            server = _servers[target] = _Server(target)
        return server


class _Server:
    """One Serve stream to the proxy, and the functions it serves."""

    def __init__(self, target: str):
        import grpc

        from switchyard import host_callback_pb2, host_callback_pb2_grpc

        self._pb = host_callback_pb2
        self._channel = grpc.insecure_channel(target, options=[
            ("grpc.max_send_message_length", _MESSAGE_BYTES_MAX),
            ("grpc.max_receive_message_length", _MESSAGE_BYTES_MAX)])
        self._outbox: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._functions: dict[str, list] = {}
        self._registering: dict[str, dict] = {}
        self.broken: Exception | None = None
        stub = host_callback_pb2_grpc.HostCallbacksStub(self._channel)
        self._events = stub.Serve(iter(self._outbox.get, None))
        threading.Thread(target=self._serve, name="switchyard-host-callbacks", daemon=True).start()

    def register(self, functions) -> str:
        key = secrets.token_hex(16)
        state: dict[str, Any] = {"done": threading.Event(), "error": None}
        with self._lock:
            if self.broken is not None:
                raise RuntimeError(f"the host callback stream to the proxy broke: {self.broken}")
            self._functions[key] = list(functions)
            self._registering[key] = state
        self._outbox.put(self._pb.HostCallbackReply(register_key=key))
        if not state["done"].wait(_REGISTER_TIMEOUT_S):
            raise RuntimeError("the Switchyard proxy did not take this program's host callbacks "
                               f"within {_REGISTER_TIMEOUT_S} s")
        if state["error"] is not None:
            raise RuntimeError(f"the Switchyard proxy refused host callbacks: {state['error']}")
        return key

    def close(self) -> None:
        self._outbox.put(None)  # ends the request stream; the proxy drops our keys
        self._channel.close()

    def forget(self, key: str) -> None:
        with self._lock:
            self._functions.pop(key, None)

    def _serve(self) -> None:
        try:
            for event in self._events:
                kind = event.WhichOneof("kind")
                if kind == "call":
                    result = self._run(event.call)
                    self._outbox.put(self._pb.HostCallbackReply(result=result))
                elif kind in ("registered", "error"):
                    self._settle(event.registered if kind == "registered" else None,
                                 event.error if kind == "error" else None)
        except Exception as e:  # the stream broke: the proxy went away
            self.broken = e
        finally:
            if self.broken is None:
                self.broken = RuntimeError("the proxy ended the host callback stream")
            with self._lock:
                waiting, self._registering = self._registering, {}
            for state in waiting.values():
                state["error"] = str(self.broken)
                state["done"].set()

    def _settle(self, key: str | None, error: str | None) -> None:
        with self._lock:
            # The proxy answers registrations in order: an error is the oldest's.
            if key is None:
                key = next(iter(self._registering), None)
            state = self._registering.pop(key, None) if key is not None else None
        if state is not None:
            state["error"] = error
            state["done"].set()

    def _run(self, call):
        pb = self._pb
        with self._lock:
            functions = self._functions.get(call.key)
        if functions is None or call.index >= len(functions):
            return pb.HostCallbackResult(call_id=call.call_id, code=_NOT_FOUND,
                                         message=f"no host callback {call.index} for this program")
        try:
            args = [None if a.token else _to_numpy(a) for a in call.args]
            outs = functions[call.index](*args)
            outs = [] if outs is None else list(outs)
            if len(outs) != len(call.results):
                raise RuntimeError(f"the callback returned {len(outs)} values; the program "
                                   f"expects {len(call.results)}")
            results = [_to_host_array(pb, spec, value) for spec, value in zip(call.results, outs)]
        except Exception:
            return pb.HostCallbackResult(
                call_id=call.call_id, code=_INTERNAL,
                message="host callback raised in the client:\n" + traceback.format_exc())
        return pb.HostCallbackResult(call_id=call.call_id, results=results)


def _to_numpy(array) -> np.ndarray:
    from switchyard.worker_client import _NUMPY

    dtype = _NUMPY.get(array.dtype)
    if dtype is None:
        raise TypeError(f"host callback operand of element type {array.dtype} is not supported")
    return np.frombuffer(array.data, dtype=dtype).reshape(tuple(array.dims)).copy()


def _to_host_array(pb, spec, value):
    from switchyard.worker_client import _NUMPY

    if spec.token:
        return pb.HostArray(token=True)
    dtype = _NUMPY.get(spec.dtype)
    if dtype is None:
        raise TypeError(f"host callback result of element type {spec.dtype} is not supported")
    array = np.asarray(value, dtype=dtype)  # tobytes() below is C order
    if array.shape != tuple(spec.dims):
        raise RuntimeError(f"the callback returned shape {array.shape}; the program expects "
                           f"{tuple(spec.dims)}")
    return pb.HostArray(dtype=spec.dtype, dims=spec.dims, data=array.tobytes())
