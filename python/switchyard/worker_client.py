"""A client of one worker's API (proto/switchyard/worker.proto).

Programs normally reach workers through the proxy; this client is what tests,
examples and tools use to talk to a worker directly.
"""

from __future__ import annotations

import itertools
import random

import grpc
import ml_dtypes
import numpy as np

from switchyard import common_pb2, worker_pb2, worker_pb2_grpc
from switchyard.programs import Program

_CHUNK_BYTES = 4 << 20
_MESSAGE_BYTES_MAX = 1 << 30

_DTYPES = {
    np.dtype(np.bool_): common_pb2.PRED,
    np.dtype(np.int8): common_pb2.S8,
    np.dtype(np.int16): common_pb2.S16,
    np.dtype(np.int32): common_pb2.S32,
    np.dtype(np.int64): common_pb2.S64,
    np.dtype(np.uint8): common_pb2.U8,
    np.dtype(np.uint16): common_pb2.U16,
    np.dtype(np.uint32): common_pb2.U32,
    np.dtype(np.uint64): common_pb2.U64,
    np.dtype(np.float16): common_pb2.F16,
    np.dtype(np.float32): common_pb2.F32,
    np.dtype(np.float64): common_pb2.F64,
    np.dtype(np.complex64): common_pb2.C64,
    np.dtype(np.complex128): common_pb2.C128,
    np.dtype(ml_dtypes.bfloat16): common_pb2.BF16,
}
_NUMPY = {v: k for k, v in _DTYPES.items()}


class WorkerError(Exception):
    """A worker call failed; `code` is the gRPC status code."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


def _call(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except grpc.RpcError as e:
        raise WorkerError(e.code(), e.details()) from None


class WorkerClient:
    def __init__(self, address: str):
        self.address = address
        self._channel = grpc.insecure_channel(address, options=[
            ("grpc.max_receive_message_length", _MESSAGE_BYTES_MAX),
            ("grpc.max_send_message_length", _MESSAGE_BYTES_MAX)])
        self._stub = worker_pb2_grpc.WorkerStub(self._channel)
        # Ids are the caller's to choose; start somewhere random so that two clients
        # of one worker do not collide.
        self._ids = itertools.count(random.getrandbits(40) << 8 | 1)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> WorkerClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def new_id(self) -> int:
        return next(self._ids)

    def info(self) -> worker_pb2.GetInfoResponse:
        return _call(self._stub.GetInfo, worker_pb2.GetInfoRequest(), timeout=10)

    def device_ids(self) -> list[int]:
        return [d.global_id for d in self.info().devices]

    def stats(self) -> worker_pb2.WorkerStats:
        return _call(self._stub.GetStats, worker_pb2.GetStatsRequest(), timeout=10)

    def put(self, array, device_id: int, buffer_id: int | None = None) -> int:
        array = np.ascontiguousarray(array)
        if array.dtype not in _DTYPES:
            raise TypeError(f"unsupported dtype {array.dtype}")
        buffer_id = buffer_id or self.new_id()
        data = array.tobytes()
        header = worker_pb2.BufferHeader(buffer_id=buffer_id, device_id=device_id,
                                         dtype=_DTYPES[array.dtype], dims=array.shape,
                                         size_bytes=len(data))
        self.put_chunks(header, [data[i:i + _CHUNK_BYTES]
                                 for i in range(0, len(data), _CHUNK_BYTES)] or [b""])
        return buffer_id

    def put_chunks(self, header: worker_pb2.BufferHeader, chunks) -> None:
        """Low-level put: the header, then `chunks` as they are (for tests of bad input)."""
        def messages():
            first = True
            for chunk in chunks:
                message = worker_pb2.PutBufferChunk(data=chunk)
                if first:
                    message.header.CopyFrom(header)
                first = False
                yield message
        _call(self._stub.PutBuffer, messages(), timeout=300)

    def get(self, buffer_id: int) -> np.ndarray:
        header, parts = None, []
        for chunk in _call(lambda: list(self._stub.GetBuffer(
                worker_pb2.GetBufferRequest(buffer_id=buffer_id), timeout=300))):
            if chunk.HasField("header"):
                header = chunk.header
            parts.append(chunk.data)
        if header is None:
            raise RuntimeError(f"the worker sent buffer {buffer_id} without its header")
        dtype = _NUMPY[header.dtype]
        return np.frombuffer(b"".join(parts), dtype=dtype).reshape(tuple(header.dims))

    def delete(self, buffer_ids) -> list[int]:
        response = _call(self._stub.DeleteBuffers,
                         worker_pb2.DeleteBuffersRequest(buffer_ids=list(buffer_ids)), timeout=30)
        return list(response.not_found)

    def compile(self, program: Program, device_ids=(), executable_id: int | None = None,
                format: str = "mlir") -> tuple[int, worker_pb2.CompileResponse]:
        executable_id = executable_id or self.new_id()
        response = _call(self._stub.Compile, worker_pb2.CompileRequest(
            executable_id=executable_id, program=program.code, format=format,
            compile_options=program.compile_options, device_ids=list(device_ids)), timeout=300)
        return executable_id, response

    def execute(self, executable_id: int, arguments: list[list[int]], num_outputs: int,
                wait: bool = False) -> list[list[int]]:
        """Launches on every device of the executable; returns output ids per device."""
        outputs = [[self.new_id() for _ in range(num_outputs)] for _ in arguments]
        try:
            _call(self._stub.Execute, worker_pb2.ExecuteRequest(
                executable_id=executable_id,
                arguments=[worker_pb2.BufferIdList(ids=a) for a in arguments],
                outputs=[worker_pb2.BufferIdList(ids=o) for o in outputs], wait=wait), timeout=300)
        except WorkerError:
            # A failed launch leaves its error under the output ids; they are ours to drop.
            self.delete([i for ids in outputs for i in ids])
            raise
        return outputs

    def delete_executables(self, executable_ids) -> list[int]:
        response = _call(self._stub.DeleteExecutables, worker_pb2.DeleteExecutablesRequest(
            executable_ids=list(executable_ids)), timeout=30)
        return list(response.not_found)

    def run(self, program: Program, *arrays, device_id: int | None = None) -> list[np.ndarray]:
        """Compile, put, execute, fetch and clean up: one program on one device."""
        device_id = self.device_ids()[0] if device_id is None else device_id
        executable_id, _ = self.compile(program, [device_id])
        args = [self.put(a, device_id) for a in arrays]
        try:
            [outs] = self.execute(executable_id, [args], program.num_outputs, wait=True)
            try:
                return [self.get(o) for o in outs]
            finally:
                self.delete(outs)
        finally:
            self.delete(args)
            self.delete_executables([executable_id])
