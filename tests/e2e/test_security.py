"""Safe by default: a plain local cluster (`switchyard up`, LocalCluster) lets no other
user of the host in, ties what a session owns to the client that opened it, and keeps a
tenant's colocated Python away from the fleet's secrets and from other tenants.

"Another user" is uid nobody (setpriv), running the suite's own Python and packages
through hard links in a directory it can read; the endpoints tried are read from the
cluster's processes (/proc), not from a list kept here."""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap

import grpc
import jax
import pytest

import switchyard
from conftest import stdout_of
from ifrt_raw import (
    RawSession,
    channel,
    g,
    host_buffer_lookup,
    host_buffer_store,
    s,
    store_metadata,
)
from switchyard import worker_pb2, worker_pb2_grpc
from switchyard.programs import lower_portable
from test_fleet_tls import make_certs

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parents[1]
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def link_tree(source: pathlib.Path, target: pathlib.Path) -> None:
    """A copy of `source` made of hard links (same file system), else of copies."""
    if subprocess.run(["cp", "-al", str(source), str(target)], capture_output=True).returncode:
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target, symlinks=True)


@pytest.fixture(scope="module")
def outsider():
    """outsider(code, env) -> CompletedProcess: `code` run by uid nobody, with this
    suite's Python, jax, grpc and switchyard."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv, to run as another user")
    home = pathlib.Path(tempfile.mkdtemp(prefix="sy-outsider-", dir="/tmp"))
    home.chmod(0o755)
    link_tree(pathlib.Path(sys.base_prefix), home / "python")
    link_tree(pathlib.Path(sysconfig.get_paths()["purelib"]), home / "site")
    link_tree(ROOT / "python", home / "switchyard")
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    python = home / "python" / "bin" / version
    # A Python built with a shared libpython finds it by its install path: point it here.
    base_env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "PYTHONDONTWRITEBYTECODE": "1",
                "LD_LIBRARY_PATH": str(home / "python" / "lib"),
                "PYTHONPATH": f"{home / 'site'}:{home / 'switchyard'}"}

    def run(code: str, env: dict | None = None, timeout: float = 120):
        return subprocess.run([*NOBODY, str(python), "-c", textwrap.dedent(code)],
                              env={**base_env, **(env or {})}, capture_output=True, text=True,
                              timeout=timeout, cwd=str(home))

    check = run("import os, grpc, jax, switchyard; print(os.getuid())")
    if check.returncode != 0 or check.stdout.strip() != "65534":
        shutil.rmtree(home, ignore_errors=True)
        pytest.skip(f"uid nobody cannot run this suite's Python here: {check.stderr[-500:]}")
    yield run
    shutil.rmtree(home, ignore_errors=True)


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def listening_endpoints(pids: list[int]) -> dict[str, list[int]]:
    """Every socket those processes listen on: "unix:/path" or "tcp:host:port" -> pids."""
    inodes: dict[str, set[int]] = {}
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.setdefault(target[8:-1], set()).add(pid)
        except OSError:
            continue  # ended meanwhile
    endpoints: dict[str, list[int]] = {}
    with open("/proc/net/unix") as f:
        next(f)
        for line in f:
            fields = line.split()
            # Flags 00010000: accepting connections.
            if len(fields) >= 8 and fields[6] in inodes and int(fields[3], 16) & 0x10000:
                endpoints[f"unix:{fields[7]}"] = sorted(inodes[fields[6]])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                    address, port = fields[1].split(":")
                    endpoints[f"tcp:{address}:{int(port, 16)}"] = sorted(inodes[fields[9]])
    return endpoints


PROBE = """
    import socket, sys
    kind, _, where = sys.argv[1].partition(":")
    if kind == "unix":
        s = socket.socket(socket.AF_UNIX)
        target = where
    else:
        s = socket.socket(socket.AF_INET6 if len(where.split(":")[0]) > 8 else socket.AF_INET)
        target = ("127.0.0.1", int(where.rsplit(":", 1)[1]))
    s.settimeout(5)
    try:
        s.connect(target)
    except OSError as e:
        print("REFUSED", type(e).__name__); sys.exit(0)
    # Connected: an HTTP/2 server that took us would answer our preface with its settings,
    # and a worker's data plane these 40 bytes (a request's size) with a refusal.
    s.sendall(b"PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n" + bytes(16))
    try:
        print("ANSWERED" if s.recv(1) else "REFUSED closed")
    except OSError as e:
        print("REFUSED", type(e).__name__)
"""

JAX_SESSION = """
    import pathwaysutils; pathwaysutils.initialize()
    import jax, jax.numpy as jnp
    print("COMPUTED", float(jnp.sum(jnp.arange(4.0))))
"""


def cluster_flags(variant: str, tmp_path: pathlib.Path) -> tuple[str, ...]:
    if variant == "default":
        return ()
    tokens = tmp_path / "tokens"
    tokens.write_text("alice sha256:" + "ab" * 32 + "\n")
    return (*make_certs(tmp_path / "certs"), f"--tokens_file={tokens}")


@pytest.mark.parametrize("variant", ["default", "tls_and_tokens"])
def test_no_other_user_of_the_host_gets_in(outsider, variant, tmp_path):
    with switchyard.LocalCluster(workers=2, devices_per_worker=2,
                                 flags=cluster_flags(variant, tmp_path)) as c:
        pids = descendants(c.pid)
        endpoints = listening_endpoints(pids)
        roles = {c.child_pid("rm"), c.child_pid("proxy"), c.child_pid("worker", 0),
                 c.child_pid("worker", 1)}
        serving = {pid for owners in endpoints.values() for pid in owners}
        assert roles <= serving, (roles, endpoints)
        # Nothing on TCP: a default cluster's every door is a socket in a private directory.
        assert not [e for e in endpoints if e.startswith("tcp:")], endpoints
        for endpoint in endpoints:
            probe = outsider(PROBE.replace("sys.argv[1]", repr(endpoint)))
            assert probe.stdout.startswith("REFUSED"), (endpoint, probe.stdout, probe.stderr)
        # A stock JAX session from the other user fails, and says why.
        refused = outsider(JAX_SESSION, env={
            "JAX_PLATFORMS": "proxy", "JAX_BACKEND_TARGET": c.target,
            "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS": "true",
            "PATHWAYS_PROXY_CONNECTION_TIMEOUT_SECS": "5"})
        assert refused.returncode != 0 and "COMPUTED" not in refused.stdout, refused.stdout
        assert "Permission denied" in refused.stderr, refused.stderr[-3000:]
        # Nor can it join the fleet as a worker.
        fake = outsider(f"""
            import grpc
            from switchyard import common_pb2, rm_pb2, rm_pb2_grpc
            stub = rm_pb2_grpc.ResourceManagerStub(grpc.insecure_channel({c.rm_address!r}))
            try:
                stub.RegisterWorker(rm_pb2.RegisterWorkerRequest(
                    protocol_version=1, address="127.0.0.1:1", slice_index=7, host_index=0,
                    plugin=common_pb2.PluginInfo(platform_name="cpu"), boot_id="fake",
                    devices=[common_pb2.DeviceInfo(local_ordinal=0, kind="cpu")]), timeout=5)
                print("REGISTERED")
            except grpc.RpcError as e:
                print("REFUSED", e.code())
        """)
        assert fake.stdout.startswith("REFUSED"), fake.stdout + fake.stderr[-2000:]
        assert [s["slice_index"] for s in c.status()["slices"]] == [0, 1]
        # The cluster's own user still needs nothing more than the target.
        if variant == "default":
            own = subprocess.run([sys.executable, "-c", textwrap.dedent(JAX_SESSION)],
                                 env={**os.environ, **c.env()}, capture_output=True, text=True,
                                 timeout=300)
            assert "COMPUTED 6.0" in own.stdout, own.stderr[-3000:]


OUTSIDER_SAME_USER = """
    import sys
    sys.path.insert(0, {here!r})
    import grpc
    from ifrt_raw import channel, g, host_buffer_store, store_metadata
    ch = channel({target!r})
    session_id = {session_id}
    outcomes = []
    lookup = ch.unary_stream("/xla.ifrt.proxy.GrpcIfrtService/HostBufferLookup",
                             request_serializer=g.GrpcHostBufferLookupRequest.SerializeToString,
                             response_deserializer=g.GrpcHostBufferLookupResponse.FromString)
    for handle in range(1, 40):  # a scan of the session's handles
        try:
            list(lookup(g.GrpcHostBufferLookupRequest(session_id=session_id, handle=handle),
                        timeout=10))
            outcomes.append(f"read {{handle}}")
        except grpc.RpcError as e:
            outcomes.append(e.code().name)
    try:
        host_buffer_store(ch)(iter([g.GrpcHostBufferStoreRequest(data=b"planted!")]),
                              metadata=store_metadata(session_id, 77, 8), timeout=10)
        outcomes.append("stored")
    except grpc.RpcError as e:
        outcomes.append(e.code().name)
    delete = ch.unary_unary("/xla.ifrt.proxy.GrpcIfrtService/HostBufferDelete",
                            request_serializer=g.GrpcHostBufferDeleteRequest.SerializeToString,
                            response_deserializer=g.GrpcHostBufferDeleteResponse.FromString)
    try:
        delete(g.GrpcHostBufferDeleteRequest(session_id=session_id, handle=5), timeout=10)
        outcomes.append("deleted")
    except grpc.RpcError as e:
        outcomes.append(e.code().name)
    print(" ".join(sorted(set(outcomes))))
"""


def test_a_session_id_alone_reaches_nothing(tmp_path):
    """Another process of the same user that knows a session's id can neither read, scan,
    store nor delete its host buffers: they answer only the client process that opened
    the session (on a Unix socket, by its pid)."""
    with switchyard.LocalCluster(workers=1, devices_per_worker=1) as c:
        ch = channel(c.target)
        session = RawSession(ch)
        session_id = session.request(init_request=s.InitRequest()).init_response.session_id
        host_buffer_store(ch)(iter([g.GrpcHostBufferStoreRequest(data=b"secret!!")]),
                              metadata=store_metadata(session_id, 5, 8), timeout=10)
        other = subprocess.run([sys.executable, "-c", textwrap.dedent(OUTSIDER_SAME_USER).format(
            here=str(HERE), target=c.target, session_id=session_id)],
            capture_output=True, text=True, timeout=120)
        assert other.stdout.strip() == "NOT_FOUND", other.stdout + other.stderr[-2000:]
        # The owner still has its buffer, and nothing was planted.
        lookup = host_buffer_lookup(ch)
        assert b"".join(r.data for r in lookup(g.GrpcHostBufferLookupRequest(
            session_id=session_id, handle=5), timeout=10)) == b"secret!!"
        with pytest.raises(grpc.RpcError) as planted:
            list(lookup(g.GrpcHostBufferLookupRequest(session_id=session_id, handle=77),
                        timeout=10))
        assert planted.value.code() == grpc.StatusCode.NOT_FOUND
        session.close()


def test_only_the_owner_of_a_session_cancels_its_launches():
    """Worker.CancelLaunches names a session; it cancels that session of the caller
    (its owner, the proxy) only, never another owner's session of the same number."""
    with switchyard.LocalCluster(workers=1, devices_per_worker=1) as c:
        [address] = c.worker_addresses()
        stub = worker_pb2_grpc.WorkerStub(grpc.insecure_channel(address))
        info = stub.GetInfo(worker_pb2.GetInfoRequest(), timeout=10)
        device = info.devices[0].global_id
        program = lower_portable(lambda: jax.numpy.ones(2) + 1,
                                 target=info.plugin.stablehlo_current_version)
        victim = [("switchyard-owner", "1001")]
        stub.Compile(worker_pb2.CompileRequest(
            executable_id=11, program=program.code, format="mlir",
            compile_options=program.compile_options, device_ids=[device]),
            metadata=victim, timeout=300)

        def launch(output: int):
            return stub.Execute(worker_pb2.ExecuteRequest(
                executable_id=11, session=42, arguments=[worker_pb2.BufferIdList()],
                outputs=[worker_pb2.BufferIdList(ids=[output])], wait=True),
                metadata=victim, timeout=60)

        launch(101)
        stub.CancelLaunches(worker_pb2.CancelLaunchesRequest(session=42),
                            metadata=[("switchyard-owner", "2002")], timeout=10)
        launch(102)  # another owner's cancellation did nothing
        stub.CancelLaunches(worker_pb2.CancelLaunchesRequest(session=42), metadata=victim,
                            timeout=10)
        with pytest.raises(grpc.RpcError) as cancelled:
            launch(103)
        assert cancelled.value.code() == grpc.StatusCode.CANCELLED, cancelled.value


TENANT = """
    import os, socket, sys
    import jax, numpy as np
    jax.config.update("jax_platforms", "proxy,cpu")
    import pathwaysutils; pathwaysutils.initialize()
    from jax.experimental import colocated_python as cp

    KEY, SOCKETS, REPO = {key!r}, {sockets!r}, {repo!r}

    @cp.colocated_python
    def probe(x):
        import os, socket
        leaks = []
        try:
            leaks.append("read the key: " + open(KEY).read()[:20])
        except OSError:
            pass
        try:
            leaks.append("listed the sockets: " + " ".join(os.listdir(SOCKETS)))
        except OSError:
            pass
        for path in (SOCKETS + "/rm.sock", SOCKETS + "/proxy.sock", SOCKETS + "/worker-0.sock"):
            try:
                socket.socket(socket.AF_UNIX).connect(path)
                leaks.append("connected to " + path)
            except OSError:
                pass
        try:
            open(os.path.join(REPO, "planted-by-a-tenant"), "w").write("x")
            leaks.append("wrote into the fleet's files")
        except OSError:
            pass
        others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) > 2]
        if others:
            leaks.append("sees processes " + " ".join(others))
        own = os.path.dirname(os.environ["TMPDIR"].rstrip("/"))
        shared = sorted(os.listdir(os.path.dirname(own)))
        if shared != sorted([".hidden", os.path.basename(own)]):
            leaks.append("sees other sidecars' directories: " + " ".join(shared))
        if leaks:
            raise RuntimeError("LEAKS: " + "; ".join(leaks))
        return x

    # Over both workers, twice: the second time, both sidecars have their directories
    # in the host's shared-memory directory.
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    split = NamedSharding(Mesh(np.array(jax.devices()), ("x",)), PartitionSpec("x"))
    ones = jax.device_put(np.ones(len(jax.devices()), np.float32), split)
    for _ in range(2):
        np.testing.assert_array_equal(np.asarray(probe(ones)), np.asarray(ones))
    print("SANDBOXED", flush=True)
    print("READY", flush=True)
    sys.stdin.readline()
"""


def test_a_tenants_colocated_python_cannot_reach_the_fleets_secrets(tmp_path):
    """On a fleet with TLS, a tenant's colocated function tries to read the key, reach the
    control sockets, write the fleet's files and see other processes: all fail. While
    its sidecar runs, no command line on the host names a session."""
    tls = make_certs(tmp_path / "certs")
    with switchyard.LocalCluster(workers=2, devices_per_worker=2, flags=tuple(tls)) as c:
        sockets = c.rm_address.removeprefix("unix:").rsplit("/", 1)[0]
        client = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(TENANT).format(
                key=str(tmp_path / "certs" / "fleet.key"), sockets=sockets, repo=str(ROOT))],
            env={**os.environ, **c.env()}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        try:
            lines = []
            for line in stdout_of(client):
                lines.append(line)
                if line.startswith("READY"):
                    break
            if "SANDBOXED\n" not in lines:
                raise AssertionError("".join(lines) + client.communicate(timeout=60)[1][-4000:])
            assert not (ROOT / "planted-by-a-tenant").exists()
            # ps: the sidecars are there, named by a counter and a random directory (they
            # were named by their session, whose id then gave its host buffers away).
            commands = []
            for pid in descendants(c.pid):
                try:
                    commands.append(pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
                                    .replace(b"\0", b" ").decode())
                except OSError:
                    pass
            sidecars = [command for command in commands if "switchyard.sidecar" in command]
            assert sidecars, commands
            for command in sidecars:
                assert re.fullmatch(r"(\S+ sidecar-init )?\S+ -m switchyard\.sidecar --label "
                                    r"sidecar-\d+ --directory \S+/switchyard-sidecar-\d+-"
                                    r"[0-9a-f]{16} ", command), command
        finally:
            client.communicate(input="\n", timeout=120)
