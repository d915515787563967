"""A raw IFRT proxy protocol client for tests that must send what JAX never would:
malformed bytes, unknown handles, requests out of order. Generates the Python
modules of proto/ifrt at import time."""

import pathlib
import queue
import subprocess
import sys
import tempfile
import threading

import grpc

_ROOT = pathlib.Path(__file__).resolve().parents[2]
_OUT = pathlib.Path(tempfile.mkdtemp(prefix="sy_ifrt_proto_"))
subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{_ROOT / 'proto'}",
                f"--python_out={_OUT}", f"--grpc_python_out={_OUT}",
                *[str(p) for p in sorted((_ROOT / "proto" / "ifrt").glob("*.proto"))],
                *[str(p) for p in sorted((_ROOT / "proto" / "xla").glob("*.proto"))]], check=True)
sys.path.insert(0, str(_OUT))

from ifrt import (  # noqa: E402  (generated just above)
    grpc_ifrt_service_pb2 as g,
    grpc_ifrt_service_pb2_grpc as gg,
    ifrt_service_pb2 as s,
    ifrt_types_pb2 as t,  # noqa: F401  (the tests take it from here)
)
from xla import (  # noqa: E402, F401  (likewise: a test module run alone finds them here)
    compile_options_pb2,
    xla_data_pb2,
)

SERVICE = "/xla.ifrt.proxy.GrpcIfrtService/"


def channel(target: str) -> grpc.Channel:
    return grpc.insecure_channel(target.removeprefix("grpc://"), options=[
        ("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)])


def host_buffer_store(ch):
    """The HostBufferStore client-stream call (metadata: see `store_metadata`)."""
    return ch.stream_unary(SERVICE + "HostBufferStore",
                           request_serializer=g.GrpcHostBufferStoreRequest.SerializeToString,
                           response_deserializer=g.GrpcHostBufferStoreResponse.FromString)


def host_buffer_lookup(ch):
    """The HostBufferLookup server-stream call (a GrpcHostBufferLookupRequest in)."""
    return ch.unary_stream(SERVICE + "HostBufferLookup",
                           request_serializer=g.GrpcHostBufferLookupRequest.SerializeToString,
                           response_deserializer=g.GrpcHostBufferLookupResponse.FromString)


def store_metadata(session_id: int, handle: int, size: int) -> list:
    metadata = g.GrpcHostBufferStoreMetadata(session_id=session_id, handle=handle, buffer_size=size)
    return [("ifrt-proxy-grpc-host-buffer-store-metadata-bin", metadata.SerializeToString())]


class OpenUpload:
    """A HostBufferStore call the test feeds chunk by chunk, on a thread of its own, so the
    test can send requests while the upload is still open."""

    def __init__(self, ch, session_id: int, handle: int, size: int, timeout: float | None = None):
        self._chunks: queue.Queue = queue.Queue()
        self.code: grpc.StatusCode | None = None  # the call's error, once it ended with one
        call = host_buffer_store(ch)
        metadata = store_metadata(session_id, handle, size)

        def run():
            try:
                call(iter(self._chunks.get, None), metadata=metadata, timeout=timeout)
            except grpc.RpcError as e:
                self.code = e.code()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def send(self, data: bytes) -> None:
        self._chunks.put(g.GrpcHostBufferStoreRequest(data=data))

    def end(self, timeout: float = 30) -> "grpc.StatusCode | None":
        """Ends the stream where it is and waits for the call; returns its error, if any."""
        self._chunks.put(None)
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the upload call did not return"
        return self.code


def get_version(ch, min_protocol=16, max_protocol=25, min_serdes=0, max_serdes=6):
    stub = gg.GrpcIfrtServiceStub(ch)
    return stub.GetVersion(g.GrpcGetVersionRequest(
        min_version=s.IfrtProxyVersion(protocol_version=min_protocol,
                                       ifrt_serdes_version_number=min_serdes),
        max_version=s.IfrtProxyVersion(protocol_version=max_protocol,
                                       ifrt_serdes_version_number=max_serdes)), timeout=10).version


class RawSession:
    """An IfrtSession stream that sends raw bytes and returns parsed responses."""

    def __init__(self, ch, protocol=25, serdes=6, initialization_data: dict | None = None):
        self._requests: queue.Queue = queue.Queue()
        session = g.GrpcIfrtSessionMetadata(version=s.IfrtProxyVersion(
            protocol_version=protocol, ifrt_serdes_version_number=serdes))
        for key, value in (initialization_data or {}).items():
            session.initialization_data.attributes[key].string_value = value
        metadata = session.SerializeToString()
        call = ch.stream_stream(SERVICE + "IfrtSession", request_serializer=lambda b: b,
                                response_deserializer=s.IfrtResponse.FromString)
        self._call = call(iter(self._requests.get, None),
                          metadata=[("ifrt-proxy-grpc-ifrt-session-metadata-bin", metadata)])
        self._op = 0

    def send_bytes(self, data: bytes) -> None:
        self._requests.put(data)

    def request(self, **arm) -> "s.IfrtResponse":
        """Sends one request (e.g. init_request=s.InitRequest()) and returns its response."""
        self._op += 1
        request = s.IfrtRequest(request_metadata=s.RequestMetadata(op_id=self._op), **arm)
        self._requests.put(request.SerializeToString())
        response = next(self._call)
        assert response.response_metadata.op_id == self._op
        return response

    def next_response(self) -> "s.IfrtResponse":
        return next(self._call)

    def close(self) -> None:
        self._requests.put(None)

    def cancel(self) -> None:
        self._call.cancel()

    def code(self) -> grpc.StatusCode:
        return self._call.code()
