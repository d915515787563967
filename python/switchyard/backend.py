"""Registers the `proxy` JAX backend that talks to a Switchyard proxy.

What `pathwaysutils.initialize()` does for Pathways, without its other patches:
`switchyard.initialize()` before the first JAX call, with `JAX_PLATFORMS=proxy`
and `JAX_BACKEND_TARGET=grpc://host:29000` (or `target=`).
"""

from __future__ import annotations

import os

_initialized = False


TOKEN_ATTRIBUTE = "switchyard_token"  # the proxy's `kTokenAttribute`
VIRTUAL_SLICES_ATTRIBUTE = "switchyard_virtual_slices"  # the proxy's `kVirtualSlicesAttribute`


def connection_options(options, token: str | None = None, virtual_slices: str | None = None):
    """Puts the tenant token (`token`, else `$SWITCHYARD_TOKEN`) and the slices to lease
    from a shared pool (`virtual_slices`, else `$SWITCHYARD_VIRTUAL_SLICES`, e.g.
    "cpu:4,cpu:4") in the session's initialization data, where the proxy looks for them.
    Values already there were chosen first and stay."""
    chosen = {
        TOKEN_ATTRIBUTE: token if token is not None else os.environ.get("SWITCHYARD_TOKEN"),
        VIRTUAL_SLICES_ATTRIBUTE: virtual_slices if virtual_slices is not None
        else os.environ.get("SWITCHYARD_VIRTUAL_SLICES"),
    }
    data = dict(options.initialization_data or {})
    changed = False
    for key, value in chosen.items():
        if value and key not in data:
            data[key] = value.encode()
            changed = True
    if changed:
        options.initialization_data = data
    return options


def initialize(target: str | None = None, connection_timeout_s: int | None = None,
               token: str | None = None, virtual_slices: str | None = None) -> None:
    """Makes `jax` use the Switchyard proxy at `target` (default `$JAX_BACKEND_TARGET`).

    `connection_timeout_s`: how long the client keeps trying to connect (default
    `$PATHWAYS_PROXY_CONNECTION_TIMEOUT_SECS`, else the client's own, two minutes).

    `token`: this tenant's token, for a proxy that requires one (default
    `$SWITCHYARD_TOKEN`). `virtual_slices`: the slices this session leases from a
    shared pool, GENERATION:TOPOLOGY,... (default `$SWITCHYARD_VIRTUAL_SLICES`, else the
    proxy's --virtual_slices); the session waits in the pool's queue until they are free.
    """
    global _initialized
    # The proxy client uses ALTS (GCP only) unless told otherwise; Switchyard serves
    # plain gRPC, so say so before the client connects.
    os.environ.setdefault("IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS", "true")
    import jax
    from jax.extend import backend
    from jax.extend.backend import ifrt_proxy

    if target is not None:
        if "://" not in target:
            target = "grpc://" + target
        jax.config.update("jax_backend_target", target)
    # The local CPU backend comes second: JAX places host callbacks' operands on it
    # (jax.debug.print, pure_callback), and the proxy stays the default.
    if not jax.config.jax_platforms or jax.config.jax_platforms == "proxy":
        jax.config.update("jax_platforms", "proxy,cpu")
    if _initialized:
        return

    def make_client():
        options = ifrt_proxy.ClientConnectionOptions()
        # As pathwaysutils does: the environment's bound unless the caller gave one.
        timeout_s = connection_timeout_s
        if timeout_s is None and os.environ.get("PATHWAYS_PROXY_CONNECTION_TIMEOUT_SECS"):
            timeout_s = int(os.environ["PATHWAYS_PROXY_CONNECTION_TIMEOUT_SECS"])
        if timeout_s is not None:
            options.connection_timeout_in_seconds = int(timeout_s)
        address = jax.config.read("jax_backend_target")
        if not address:
            raise RuntimeError(
                "no Switchyard proxy address: set JAX_BACKEND_TARGET or pass target=")
        options = connection_options(options, token, virtual_slices)
        check_token(address, options)
        return ifrt_proxy.get_client(address, options)

    backend.register_backend_factory("proxy", make_client, priority=-1)
    # jax.debug.print, pure_callback, io_callback: served from this process.
    from switchyard import host_callbacks
    host_callbacks.install()
    # The workers keep their own compilation cache; the client's would try to
    # serialize proxy executables, which the proxy client cannot do.
    jax.config.update("jax_enable_compilation_cache", False)
    if os.environ.get("ENABLE_PATHWAYS_PERSISTENCE") == "1":
        _use_worker_checkpoints()
    # jax.profiler traces the proxy and the workers too.
    from switchyard import profiling
    profiling.install()
    _initialized = True


def check_token(address: str, options) -> None:
    """Fails at once, with the proxy's reason, when the proxy at `address` refuses the
    token in `options` (connection options): jaxlib's client would retry the refused
    session every second until its connection timeout. Anything else (a proxy not up
    yet, one too old to be asked) is left to that client."""
    import grpc

    from switchyard import proxy_pb2, proxy_pb2_grpc

    target = address.removeprefix("grpc://")
    token = (options.initialization_data or {}).get(TOKEN_ATTRIBUTE) or b""
    token = token.decode() if isinstance(token, bytes) else str(token)
    with grpc.insecure_channel(target) as channel:
        try:
            # Never longer than the client's own connection attempt may take.
            timeout_s = min(10, options.connection_timeout_in_seconds or 10)
            proxy_pb2_grpc.ProxyAccessStub(channel).CheckToken(
                proxy_pb2.CheckTokenRequest(token=token), timeout=timeout_s)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.UNAUTHENTICATED:
                raise RuntimeError(
                    f"the Switchyard proxy at {address} refuses this client (UNAUTHENTICATED): "
                    f"{e.details()} "
                    "(pass token= to switchyard.initialize() or set $SWITCHYARD_TOKEN)") from None


def _use_worker_checkpoints() -> None:
    """Orbax saves and restores jax.Arrays through Pathways' persistence API, as with
    pathwaysutils: each worker writes and reads its own shards (docs/checkpoints.md)."""
    import datetime

    import jax
    from orbax.checkpoint import type_handlers
    from orbax.checkpoint._src.metadata import array_metadata_store
    from orbax.checkpoint._src.serialization import cloud_pathways_array_handler

    type_handlers.register_type_handler(
        jax.Array,
        cloud_pathways_array_handler.CloudPathwaysArrayHandler(
            timeout=datetime.timedelta(hours=1),
            array_metadata_store=array_metadata_store.Store()),
        override=True)


def shutdown() -> None:
    """Closes this process's proxy session now, freeing what it holds on the workers.

    Call it before the cluster goes away (e.g. at the end of a `LocalCluster` block):
    otherwise the JAX client finds the proxy gone when it cleans up at exit and logs
    errors for every object it still holds. Arrays still referenced become unusable.
    """
    import gc

    import jax
    import jax.extend.backend

    from switchyard import host_callbacks

    jax.clear_caches()
    gc.collect()  # executables and arrays in reference cycles hold the client
    host_callbacks.close()
    jax.extend.backend.clear_backends()
    gc.collect()  # the client itself, once nothing else holds it
