"""JAX plugin hook: carries `$SWITCHYARD_TOKEN` and `$SWITCHYARD_VIRTUAL_SLICES` for
clients set up by other code.

JAX calls `initialize()` of every installed `jax_plugins` entry point before it makes
its backends. A program that sets up the proxy backend itself (`pathwaysutils.initialize()`)
never passes Switchyard a token; with the switchyard package installed and
`SWITCHYARD_TOKEN` (or `SWITCHYARD_VIRTUAL_SLICES`) set, this puts it in every proxy
session's initialization data, and a token the proxy refuses fails at once. Without the
variables it does nothing.
"""

from __future__ import annotations

import os


def initialize() -> None:
    if not os.environ.get("SWITCHYARD_TOKEN") and not os.environ.get("SWITCHYARD_VIRTUAL_SLICES"):
        return
    from jax.extend.backend import ifrt_proxy

    get_client = ifrt_proxy.get_client
    if getattr(get_client, "_switchyard_token", False):
        return
    from switchyard.backend import check_token, connection_options

    def get_client_with_token(address, options=None):
        if options is None:
            options = ifrt_proxy.ClientConnectionOptions()
        options = connection_options(options)
        check_token(address, options)  # a refused token fails now, not after the timeout
        return get_client(address, options)

    get_client_with_token._switchyard_token = True  # type: ignore[attr-defined]
    ifrt_proxy.get_client = get_client_with_token
