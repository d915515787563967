"""A proxy shared by tenants: tokens, sessions that cannot reach each other's host
buffers, per-session quotas. Real client processes (`JAX_PLATFORMS=proxy`) against
rm + one worker + a proxy started with `--tokens_file`."""

import hashlib
import os
import pathlib
import subprocess
import sys
import textwrap
import time

import grpc
import pytest

from conftest import proxy_address, scrape, wait_until
from ifrt_raw import (
    RawSession,
    channel,
    g,
    host_buffer_lookup,
    host_buffer_store,
    s,
    store_metadata,
)

HERE = pathlib.Path(__file__).parent
WHEEL_PYTHON = HERE.parents[1] / ".venv-wheel" / "bin" / "python"
TOKENS = {"alice": "alice-secret-1", "bob": "bob-secret-2"}
MAX_ARRAYS = 40
MAX_HOST_BUFFER_BYTES = 1 << 20
PROXY_MAX_HOST_BUFFER_BYTES = 3 << 19  # all sessions together: one and a half sessions' worth


@pytest.fixture
def pool(spawn, rm, start_worker, tmp_path):
    tokens_file = tmp_path / "tokens"
    tokens_file.write_text("# tenant and the SHA-256 of its token\n" + "".join(
        f"{tenant} sha256:{hashlib.sha256(token.encode()).hexdigest()}\n"
        for tenant, token in TOKENS.items()))
    start_worker(0, devices=2)
    proxy = spawn("proxy", "--server_port=0", f"--resource_manager_address={rm.address}",
                  f"--tokens_file={tokens_file}", f"--session_max_arrays={MAX_ARRAYS}",
                  f"--session_max_host_buffer_bytes={MAX_HOST_BUFFER_BYTES}",
                  f"--proxy_max_host_buffer_bytes={PROXY_MAX_HOST_BUFFER_BYTES}",
                  "--metrics_port=0")
    proxy.wait_for("IFRT proxy server started with status OK")
    proxy.target = f"grpc://{proxy_address(proxy)}"
    return proxy


def run(pool, code: str, env: dict | None = None, python=sys.executable):
    extra = env or {}
    env = {**os.environ, "JAX_PLATFORMS": "proxy", "JAX_BACKEND_TARGET": pool.target, **extra}
    if "SWITCHYARD_TOKEN" not in extra:
        env.pop("SWITCHYARD_TOKEN", None)
    return subprocess.run([str(python), "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=180)


COMPUTE = """
    import jax, jax.numpy as jnp, numpy as np
    x = jnp.arange(8.0)
    assert np.allclose(np.asarray(x * 2 + 1), np.arange(8.0) * 2 + 1)
    print("COMPUTED on", len(jax.devices()), "devices")
    import switchyard; switchyard.shutdown()
"""


def test_a_session_without_a_valid_token_is_refused(pool):
    for token, why in ((None, "requires a tenant token"),
                       ("not-a-token", "not one this proxy accepts")):
        # With the client's own connection timeout (2 minutes, during which jaxlib retries a
        # refused session): the refusal ends the attempt at once.
        init = f"import switchyard; switchyard.initialize(token={token!r})\n"
        started = time.monotonic()
        result = run(pool, init + textwrap.dedent(COMPUTE))
        took = time.monotonic() - started
        assert result.returncode != 0, result.stdout
        assert "UNAUTHENTICATED" in result.stderr and why in result.stderr, result.stderr[-3000:]
        assert "COMPUTED" not in result.stdout
        assert took < 30, took  # a Python start and one call; was the 2-minute timeout
    # The refusals are logged without the token, and counted; the proxy goes on serving.
    assert "not-a-token" not in pool.output
    assert "refused a session from" in pool.output
    result = run(pool, "import switchyard; switchyard.initialize(token='alice-secret-1')\n"
                 + textwrap.dedent(COMPUTE))
    assert "COMPUTED on 2 devices" in result.stdout, result.stderr[-3000:]
    assert "session 1 (alice) opened" in pool.output


def test_a_token_from_the_environment(pool):
    result = run(pool, "import switchyard; switchyard.initialize()\n" + textwrap.dedent(COMPUTE),
                 env={"SWITCHYARD_TOKEN": TOKENS["bob"]})
    assert "COMPUTED on 2 devices" in result.stdout, result.stderr[-3000:]
    assert "(bob) opened" in pool.output


@pytest.mark.skipif(not WHEEL_PYTHON.exists(), reason="no .venv-wheel (./dev test makes it)")
def test_a_token_reaches_a_backend_that_other_code_set_up(pool):
    """pathwaysutils registers the proxy backend itself and passes no initialization data:
    the installed package's JAX plugin hook adds $SWITCHYARD_TOKEN. The factory below is
    pathwaysutils' own, written out, since the wheel venv holds only jax and switchyard."""
    code = """
        import os, jax
        from jax.extend import backend
        from jax.extend.backend import ifrt_proxy
        def make_client():
            options = ifrt_proxy.ClientConnectionOptions()
            if os.environ.get("PATHWAYS_PROXY_CONNECTION_TIMEOUT_SECS"):
                options.connection_timeout_in_seconds = int(
                    os.environ["PATHWAYS_PROXY_CONNECTION_TIMEOUT_SECS"])
            return ifrt_proxy.get_client(jax.config.read("jax_backend_target"), options)
        backend.register_backend_factory("proxy", make_client, priority=-1)
    """
    code = textwrap.dedent(code) + textwrap.dedent(COMPUTE)
    env = {"SWITCHYARD_TOKEN": TOKENS["alice"], "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS": "true"}
    result = run(pool, code, env=env, python=WHEEL_PYTHON)
    assert "COMPUTED on 2 devices" in result.stdout, result.stderr[-3000:]
    result = run(pool, code, env={**env, "SWITCHYARD_TOKEN": "",
                                  "PATHWAYS_PROXY_CONNECTION_TIMEOUT_SECS": "3"},
                 python=WHEEL_PYTHON)
    assert "requires a tenant token" in result.stderr, result.stderr[-3000:]
    # A wrong token, through the plugin hook: refused at once, not after the timeout.
    started = time.monotonic()
    result = run(pool, code, env={**env, "SWITCHYARD_TOKEN": "not-a-token"}, python=WHEEL_PYTHON)
    assert "not one this proxy accepts" in result.stderr, result.stderr[-3000:]
    assert time.monotonic() - started < 30


def test_pathwaysutils_with_a_token_from_the_environment(pool):
    from importlib.metadata import entry_points
    if not any(e.name == "switchyard" for e in entry_points(group="jax_plugins")):
        pytest.skip("switchyard's package metadata is not installed here (./dev setup makes it)")
    code = "import pathwaysutils; pathwaysutils.initialize()\n" + textwrap.dedent(COMPUTE)
    env = {"SWITCHYARD_TOKEN": TOKENS["bob"], "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS": "true"}
    result = run(pool, code, env=env)
    assert "COMPUTED on 2 devices" in result.stdout, result.stderr[-3000:]
    assert "(bob) opened" in pool.output


def raw_session(pool, token: str) -> tuple[grpc.Channel, RawSession, int]:
    ch = channel(pool.target)
    session = RawSession(ch, initialization_data={"switchyard_token": token.encode()})
    session_id = session.request(init_request=s.InitRequest()).init_response.session_id
    return ch, session, session_id


def test_sessions_together_stay_within_the_proxys_host_buffer_bound(pool):
    """One tenant's staged host buffer leaves the other less room; past the proxy's bound
    an upload is refused naming it, and the room comes back when the first session ends."""
    ch, holder, holder_id = raw_session(pool, TOKENS["alice"])
    held = MAX_HOST_BUFFER_BYTES - 4096  # within alice's own bound
    host_buffer_store(ch)(iter([g.GrpcHostBufferStoreRequest(data=b"\1" * held)]),
                          metadata=store_metadata(holder_id, 7, held), timeout=30)
    assert scrape(pool)["switchyard_proxy_host_buffer_bytes"] == held
    upload = f"""
        import jax, numpy as np
        import switchyard
        switchyard.initialize(token={TOKENS['bob']!r})
        try:  # within bob's own bound, not beside alice's buffer
            jax.device_put(np.ones({PROXY_MAX_HOST_BUFFER_BYTES - held} // 4 + 1024,
                                   np.float32)).block_until_ready()
            print("UPLOADED")
        except Exception as e:
            print("UPLOAD REFUSED")
    """
    refused = run(pool, upload)
    assert "UPLOAD REFUSED" in refused.stdout, refused.stdout + refused.stderr[-3000:]
    assert "--proxy_max_host_buffer_bytes" in refused.stderr, refused.stderr[-3000:]
    holder.close()
    wait_until(lambda: scrape(pool)["switchyard_proxy_host_buffer_bytes"] == 0, 30,
               "the ended session's host buffer given back")
    accepted = run(pool, upload)
    assert "UPLOADED" in accepted.stdout, accepted.stdout + accepted.stderr[-3000:]
    assert scrape(pool)["switchyard_proxy_host_buffer_bytes"] == 0


def test_session_ids_stay_secret_and_host_buffers_need_one(pool):
    """Host-buffer RPCs carry only the session id: a random 64-bit number that only its
    client learns (the proxy never logs it). Without it, nothing of the session's is
    reachable; with it, only from the client's own host (that part is a unit test:
    every process here shares 127.0.0.1)."""
    ch, session, session_id = raw_session(pool, TOKENS["alice"])
    host_buffer_store(ch)(iter([g.GrpcHostBufferStoreRequest(data=b"secret!!")]),
                          metadata=store_metadata(session_id, 5, 8))
    lookup = host_buffer_lookup(ch)
    assert b"".join(r.data for r in lookup(g.GrpcHostBufferLookupRequest(
        session_id=session_id, handle=5), timeout=10)) == b"secret!!"
    # A neighbour's guesses near the id, as a prober would try.
    for guess in (session_id ^ 1, session_id + 1, session_id - 1, 1, 2):
        with pytest.raises(grpc.RpcError) as e:
            list(lookup(g.GrpcHostBufferLookupRequest(session_id=guess, handle=5), timeout=10))
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert str(session_id) not in pool.output
    assert "session 1 (alice) opened" in pool.output
    session.close()


def test_an_array_quota_answers_resource_exhausted_and_the_session_goes_on(pool):
    code = f"""
        import gc, jax, jax.numpy as jnp
        import switchyard
        switchyard.initialize(token={TOKENS['alice']!r})
        held = []
        try:
            for i in range({MAX_ARRAYS} * 2):
                held.append(jnp.full((4,), float(i)))
                held[-1].block_until_ready()
            raise SystemExit("no quota")
        except Exception as e:
            assert "RESOURCE_EXHAUSTED" in str(e) and "--session_max_arrays" in str(e), e
            print("ARRAYS REFUSED after", len(held))
        held.clear(); gc.collect()
        assert float(jnp.sum(jnp.ones(4))) == 4.0  # freed: the session goes on
        print("GOES ON")
        switchyard.shutdown()
    """
    result = run(pool, code)
    assert f"ARRAYS REFUSED after {MAX_ARRAYS}" in result.stdout, (result.stdout
                                                                   + result.stderr[-3000:])
    assert "GOES ON" in result.stdout, result.stdout + result.stderr[-3000:]


def test_an_upload_past_the_host_buffer_quota_is_refused_with_the_reason(pool):
    """jaxlib's client ends its session when an upload fails (it logs the reason): the
    refusal must name the bound, and the proxy must serve the next session."""
    code = f"""
        import jax, numpy as np
        import switchyard
        switchyard.initialize(token={TOKENS['bob']!r})
        try:
            too_big = np.ones({MAX_HOST_BUFFER_BYTES} // 4 + 1024, np.float32)
            jax.device_put(too_big).block_until_ready()
            print("NOT REFUSED")
        except Exception as e:
            print("UPLOAD REFUSED")
    """
    result = run(pool, code)
    assert "UPLOAD REFUSED" in result.stdout, result.stdout + result.stderr[-3000:]
    assert "RESOURCE_EXHAUSTED" in result.stderr
    assert "--session_max_host_buffer_bytes" in result.stderr
    small = run(pool, f"import switchyard; switchyard.initialize(token={TOKENS['bob']!r})\n"
                + textwrap.dedent(COMPUTE))
    assert "COMPUTED on 2 devices" in small.stdout, small.stderr[-3000:]
