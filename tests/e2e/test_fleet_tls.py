"""Mutual TLS inside the fleet (--tls_ca_file, --tls_cert_file, --tls_key_file): rm,
worker and proxy with certificates from deploy/tls/make-certs.sh serve a real JAX
client, while a process without the fleet's certificate can neither call a worker nor
join the fleet."""

import os
import pathlib
import subprocess
import sys

import grpc
import pytest

import switchyard
from switchyard import common_pb2, rm_pb2, rm_pb2_grpc, worker_pb2, worker_pb2_grpc
from switchyard.cluster import free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]


def make_certs(directory: pathlib.Path) -> list[str]:
    subprocess.run([str(ROOT / "deploy" / "tls" / "make-certs.sh"), str(directory)], check=True,
                   capture_output=True, timeout=60)
    return [f"--tls_ca_file={directory / 'ca.pem'}", f"--tls_cert_file={directory / 'fleet.pem'}",
            f"--tls_key_file={directory / 'fleet.key'}"]


@pytest.fixture
def fleet(spawn, plugin, tmp_path):
    tls = make_certs(tmp_path / "fleet")
    rm_port, proxy_port = free_port(), free_port()
    rm = spawn("rm", f"--server_port={rm_port}", *tls)
    rm.wait_for("resource manager listening")
    worker = spawn("worker", f"--resource_manager_address=127.0.0.1:{rm_port}", "--server_port=0",
                   "--slice_index=0", f"--pjrt_plugin={plugin}", "--cpu_device_count=2", *tls)
    worker.address = worker.wait_for("worker serving on").split("worker serving on ")[1].split()[0]
    worker.wait_for("registered with the resource manager")
    proxy = spawn("proxy", f"--server_port={proxy_port}",
                  f"--resource_manager_address=127.0.0.1:{rm_port}", *tls)
    proxy.wait_for("IFRT proxy server started with status OK")
    return {"tls": tls, "rm": f"127.0.0.1:{rm_port}", "worker": worker.address,
            "target": f"grpc://127.0.0.1:{proxy_port}", "tmp": tmp_path}


def status(fleet, *tls):
    return subprocess.run([switchyard.find_binary(), "status",
                           f"--resource_manager_address={fleet['rm']}", *tls],
                          capture_output=True, text=True, timeout=60)


def tls_channel(address: str, certs: pathlib.Path, cert: str = "fleet") -> grpc.Channel:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=(certs / "ca.pem").read_bytes(),
        private_key=(certs / f"{cert}.key").read_bytes(),
        certificate_chain=(certs / f"{cert}.pem").read_bytes())
    return grpc.secure_channel(address, credentials,
                               options=[("grpc.ssl_target_name_override", "switchyard"),
                                        ("grpc.use_local_subchannel_pool", 1)])


def test_a_jax_client_runs_through_a_fleet_on_mutual_tls(fleet):
    code = """
import jax, jax.numpy as jnp, numpy as np, switchyard
switchyard.initialize()
x = jax.device_put(np.arange(16.0).reshape(2, 8),
                   jax.sharding.NamedSharding(jax.sharding.Mesh(jax.devices(), ("d",)),
                                              jax.sharding.PartitionSpec("d")))
local = np.arange(16.0).reshape(2, 8)
assert np.allclose(np.asarray(jnp.sin(x) @ x.T), np.sin(local) @ local.T)
print("TLS FLEET OK", len(jax.devices()))
switchyard.shutdown()
"""
    env = {**os.environ, "JAX_PLATFORMS": "proxy", "JAX_BACKEND_TARGET": fleet["target"]}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                            timeout=180)
    assert "TLS FLEET OK 2" in result.stdout, result.stderr[-3000:]
    # An operator's `status` needs the fleet's certificate too.
    assert "(1 healthy)" in status(fleet, *fleet["tls"]).stdout
    refused = status(fleet)
    assert refused.returncode != 0, refused.stdout


def test_a_worker_obeys_only_holders_of_the_fleets_certificate(fleet):
    request = worker_pb2.GetInfoRequest()
    # Plain gRPC, as the prober of an open port would try first.
    with grpc.insecure_channel(fleet["worker"]) as plain:
        with pytest.raises(grpc.RpcError) as e:
            worker_pb2_grpc.WorkerStub(plain).GetInfo(request, timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    # TLS with a certificate of another CA: the worker refuses the handshake.
    rogue = fleet["tmp"] / "rogue"
    make_certs(rogue)
    with tls_channel(fleet["worker"], rogue) as other_ca:
        with pytest.raises(grpc.RpcError) as e:
            worker_pb2_grpc.WorkerStub(other_ca).GetInfo(request, timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    # TLS without a client certificate at all.
    anonymous = grpc.secure_channel(
        fleet["worker"],
        grpc.ssl_channel_credentials(
            root_certificates=(fleet["tmp"] / "fleet" / "ca.pem").read_bytes()),
        options=[("grpc.ssl_target_name_override", "switchyard"),
                 ("grpc.use_local_subchannel_pool", 1)])
    with anonymous, pytest.raises(grpc.RpcError) as e:
        worker_pb2_grpc.WorkerStub(anonymous).GetInfo(request, timeout=5)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    # The fleet's own certificate: answered (so the refusals above are the certificate's).
    with tls_channel(fleet["worker"], fleet["tmp"] / "fleet") as member:
        info = worker_pb2_grpc.WorkerStub(member).GetInfo(request, timeout=10)
    assert len(info.devices) == 2


def test_a_process_without_the_certificate_cannot_join_the_fleet(fleet, spawn, plugin):
    fake = rm_pb2.RegisterWorkerRequest(
        protocol_version=1, address="127.0.0.1:1", slice_index=7, host_index=0,
        plugin=common_pb2.PluginInfo(platform_name="cpu"),
        devices=[common_pb2.DeviceInfo(local_ordinal=0, kind="cpu")], boot_id="fake")
    with grpc.insecure_channel(fleet["rm"]) as plain:
        with pytest.raises(grpc.RpcError) as e:
            rm_pb2_grpc.ResourceManagerStub(plain).RegisterWorker(fake, timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    # A real worker started without the certificate never registers.
    outsider = spawn("worker", f"--resource_manager_address={fleet['rm']}", "--server_port=0",
                     "--slice_index=1", f"--pjrt_plugin={plugin}", "--cpu_device_count=2",
                     "--register_timeout_s=3")
    assert outsider.wait_exit(timeout=60) != 0
    assert "registered with the resource manager" not in outsider.output
    shown = status(fleet, *fleet["tls"]).stdout
    assert "(1 healthy)" in shown and "slice 7" not in shown and "slice 1" not in shown, shown
