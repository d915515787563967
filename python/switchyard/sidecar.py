"""The colocated Python sidecar: `python -m switchyard.sidecar`, started by a worker.

A worker starts one per session (at its first colocated call) and talks to it over
stdin/stdout (switchyard/sidecar.proto; each message its 4-byte little-endian length,
then the bytes). The sidecar is one process of a multi-process JAX on CPU whose processes
are the session's hosts, so a function sees what a multi-controller JAX process would:
`jax.process_index()`, `jax.process_count()`, arrays over every host's devices of
which this host's shards are addressable. Device ids inside the sidecar differ from the
client's; the client's pickles are translated both ways.

A call's array bytes come and go in two sealed memory files the worker passes with it
(SCM_RIGHTS on the channel): the inputs' (copied out: the worker reuses the file) and the
outputs' (whose pages become the worker's device buffers). What the functions print goes
to stderr (the worker's log): stdout carries the protocol.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import socket
import struct
import sys
import threading
import traceback
from typing import Any

from switchyard import common_pb2, sidecar_pb2

_OK, _UNKNOWN, _FAILED_PRECONDITION = 0, 2, 9
# Unpickled programs a sidecar keeps (each a function and its specs; a colocated class's
# object lives while its methods' programs do).
_PROGRAMS_KEPT = 4096
# Array files the worker passed that stay mapped here for its next calls.
_FILES_MAPPED = 8
_FILES_MAPPED_BYTES = 1 << 30


# The sidecar.proto protocol this sidecar speaks (SidecarReply.protocol): 2 takes a
# call's arrays in memory files passed with the request.
_PROTOCOL = 2


def _read_exactly(channel: socket.socket, size: int, fds: list[int]) -> bytes | None:
    """`size` bytes of the channel; descriptors passed with them are added to `fds`."""
    data = b""
    while len(data) < size:
        chunk, ancillary, _, _ = channel.recvmsg(size - len(data), socket.CMSG_SPACE(4 * 4))
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.extend(struct.unpack(f"{len(payload) // 4}i", payload[:len(payload) // 4 * 4]))
        if not chunk:
            return None
        data += chunk
    return data


def _receive(channel: socket.socket) -> tuple[sidecar_pb2.SidecarRequest | None, list[int]]:
    """The next request and the descriptors passed with it (the caller closes them)."""
    fds: list[int] = []
    header = _read_exactly(channel, 4, fds)
    if header is None:
        return None, fds
    body = _read_exactly(channel, struct.unpack("<I", header)[0], fds)
    if body is None:
        return None, fds
    return sidecar_pb2.SidecarRequest.FromString(body), fds


def _send(stream, reply: sidecar_pb2.SidecarReply) -> None:
    body = reply.SerializeToString()
    stream.write(struct.pack("<I", len(body)) + body)
    stream.flush()


def _numpy_dtypes():
    import ml_dtypes
    import numpy as np

    return {
        common_pb2.PRED: np.dtype(np.bool_), common_pb2.S8: np.dtype(np.int8),
        common_pb2.S16: np.dtype(np.int16), common_pb2.S32: np.dtype(np.int32),
        common_pb2.S64: np.dtype(np.int64), common_pb2.U8: np.dtype(np.uint8),
        common_pb2.U16: np.dtype(np.uint16), common_pb2.U32: np.dtype(np.uint32),
        common_pb2.U64: np.dtype(np.uint64), common_pb2.F16: np.dtype(np.float16),
        common_pb2.F32: np.dtype(np.float32), common_pb2.F64: np.dtype(np.float64),
        common_pb2.C64: np.dtype(np.complex64), common_pb2.C128: np.dtype(np.complex128),
        common_pb2.BF16: np.dtype(ml_dtypes.bfloat16),
        common_pb2.F8E5M2: np.dtype(ml_dtypes.float8_e5m2),
        common_pb2.F8E4M3FN: np.dtype(ml_dtypes.float8_e4m3fn),
        common_pb2.S4: np.dtype(ml_dtypes.int4), common_pb2.U4: np.dtype(ml_dtypes.uint4),
    }


class World:
    """This process's JAX: one process of a CPU 'cluster' formed by the session's hosts.

    JAX's multi-process CPU client learns the other processes' devices through a
    coordination service. The other hosts' sidecars are independent processes (one may
    crash and restart alone), so each sidecar runs a private service and stands in for
    the other processes itself: their clients only publish their device counts and are
    dropped once the topology is known.
    """

    def __init__(self, hosts: list[list[int]], host: int, directory: str = ""):
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = re.sub(r"--xla_force_host_platform_device_count=\S*", "", flags)
        os.environ["JAX_PLATFORMS"] = "cpu"
        import jax
        from jax._src import distributed
        from jax._src.lib import _jax

        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_num_cpu_devices", len(hosts[host]))
        self._keep = []
        if len(hosts) > 1:
            if directory:
                # In the sidecar's private directory: no other process of the host reaches it.
                address = f"unix:{directory}/coordinator.sock"
            else:
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", 0))
                    address = f"127.0.0.1:{probe.getsockname()[1]}"
            service = _jax.get_distributed_runtime_service(address, len(hosts))
            clients = [_jax.get_distributed_runtime_client(address, i, init_timeout=60)
                       for i in range(len(hosts))]
            _run_all([c.connect for c in clients])
            distributed.global_state.service = service
            distributed.global_state.client = clients[host]
            distributed.global_state.process_id = host
            distributed.global_state.num_processes = len(hosts)
            others = {}

            def stand_in(i):
                others[i] = _jax.get_tfrt_cpu_client(
                    asynchronous=True, distributed_client=clients[i], node_id=i,
                    num_nodes=len(hosts), num_devices=len(hosts[i]))

            _run_all([lambda i=i: stand_in(i) for i in range(len(hosts)) if i != host]
                     + [jax.devices])
            others.clear()
            self._keep = [service, clients]
        by_process: dict[int, list[Any]] = {}
        for device in jax.devices():
            by_process.setdefault(device.process_index, []).append(device)
        self.to_local: dict[int, Any] = {}
        for process, ids in enumerate(hosts):
            local = sorted(by_process.get(process, []), key=lambda d: d.id)
            if len(local) != len(ids):
                raise RuntimeError(f"process {process}: {len(local)} CPU devices, want {len(ids)}")
            self.to_local.update(zip(ids, local))
        self.to_client = {d.id: i for i, d in self.to_local.items()}
        self._translate_pickles()

    def _translate_pickles(self):
        """Makes colocated_python's pickles name the client's device ids."""
        import numpy as np
        from jax.experimental.colocated_python import serialization as s

        to_client = self.to_client
        s._get_cpu_device_map = lambda: self.to_local

        def reduce_mesh(mesh):
            ids = np.vectorize(lambda d: to_client[d.id], otypes=[int])(mesh.devices)
            return s._unreduce_mesh, (ids, mesh.axis_names, mesh.axis_types)

        def reduce_device_list(devices):
            return s._unreduce_device_list, ([to_client[d.id] for d in devices],)

        def reduce_single_device_sharding(sharding):
            device = next(iter(sharding.device_set))
            return s._unreduce_single_device_sharding, (to_client[device.id], sharding.memory_kind)

        s._reduce_mesh = s._make_reduce_func_with_common_obj(reduce_mesh)
        s._reduce_device_list = s._make_reduce_func_with_common_obj(reduce_device_list)
        s._reduce_single_device_sharding = s._make_reduce_func_with_common_obj(
            reduce_single_device_sharding)

    def shutdown(self):
        # The coordination agents would report each other's end as a failure.
        os._exit(0)


def _run_all(functions):
    errors = []

    def run(f):
        try:
            f()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(f,)) for f in functions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


class Runner:
    """Runs the client's pickled functions on this host's shards."""

    def __init__(self, world: World):
        import numpy as np

        self.world = world
        self.np = np
        # digest of the pickle -> unpickled, least recently used first
        self.programs: dict[bytes, Any] = {}
        # (st_dev, st_ino) of a passed file -> its mapping, least recently used first
        self.mapped: dict[tuple[int, int], Any] = {}
        self.dtypes = _numpy_dtypes()

    def _load(self, shard, inputs):
        np = self.np
        if shard.dtype == common_pb2.STRING:
            values = [b.decode("utf-8") for b in shard.strings]
            return np.array(values, dtype=np.dtypes.StringDType()).reshape(tuple(shard.dims))
        dtype = self.dtypes.get(shard.dtype)
        if dtype is None:
            raise TypeError(f"dtype {common_pb2.DType.Name(shard.dtype)} is not served")
        shape = tuple(shard.dims)
        if dtype.itemsize * int(np.prod(shape, dtype=np.int64)) != shard.bytes:
            raise ValueError(f"{shard.bytes} bytes for {dtype}{list(shape)}")
        if not shard.bytes:
            return np.zeros(shape, dtype)
        # A copy, as the file serves the next call and JAX on CPU would alias the mapping;
        # 64-byte aligned, so that JAX uses it in place (a plain copy would be copied again).
        raw = np.empty(shard.bytes + 64, np.uint8)
        start = -raw.ctypes.data % 64
        out = raw[start:start + shard.bytes].view(dtype).reshape(shape)
        np.copyto(out, np.ndarray(shape, dtype, buffer=inputs, offset=shard.offset))
        return out

    def run(self, call: sidecar_pb2.SidecarCall, fds: list[int]) -> sidecar_pb2.SidecarReply:
        """Runs the call on the files passed with it (sidecar.proto: inputs, then outputs)."""
        wanted = int(call.inputs_file) + int(call.outputs_file)
        if len(fds) != wanted:
            raise RuntimeError(f"{len(fds)} files came with the call; it names {wanted}")
        maps = [self._map(fd) for fd in fds]
        inputs = maps[0] if call.inputs_file else None
        outputs = maps[-1] if call.outputs_file else None
        return self._run(call, inputs, outputs)

    def _map(self, fd: int):
        """The file's mapping: the worker passes the same few files again and again, and
        mapping one costs about as much as the copy through it."""
        import mmap

        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        mapped = self.mapped.pop(key, None)
        if mapped is None or len(mapped) != st.st_size:
            # Populated in one go: a page fault per page cost more than the copy through them.
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
            mapped = mmap.mmap(fd, st.st_size, flags=flags)
        self.mapped[key] = mapped
        # A file the worker has let go stays while mapped here: a few, least recently used.
        while (len(self.mapped) > _FILES_MAPPED
               or sum(len(m) for m in self.mapped.values()) > _FILES_MAPPED_BYTES):
            oldest = self.mapped.pop(next(iter(self.mapped)))
            if oldest is mapped:
                self.mapped[key] = mapped
                break
            try:
                oldest.close()
            except BufferError:  # an error's traceback holds a view: closed when collected
                pass
        return mapped

    def _run(self, call: sidecar_pb2.SidecarCall, inputs, outputs) -> sidecar_pb2.SidecarReply:
        import jax
        from jax._src import tree_util
        from jax.experimental.colocated_python import serialization

        key = hashlib.sha256(call.program).digest()
        program = self.programs.pop(key, None)
        if program is None:
            try:
                program = serialization._deserialize(call.program)
            except Exception as e:
                raise RuntimeError(
                    f"the sidecar (Python {sys.version.split()[0]}, jax {jax.__version__}) cannot "
                    f"unpickle function '{call.name}': the client's Python, jax and cloudpickle "
                    "must be the versions the workers' --python has") from e
        # Kept, as a compiled executable keeps its program: a colocated class's object lives
        # as long as the unpickled method that made it.
        self.programs[key] = program
        while len(self.programs) > _PROGRAMS_KEPT:
            self.programs.pop(next(iter(self.programs)))
        fun, in_treedef, in_specs, _, out_specs, _ = program
        if len(call.inputs) != len(in_specs):
            raise ValueError(f"{len(call.inputs)} inputs for {len(in_specs)} specs")
        leaves = []
        for spec, array in zip(in_specs, call.inputs):
            pieces = [jax.device_put(self._load(shard, inputs),
                                     self.world.to_local[shard.device_id])
                      for shard in array.shards]
            leaves.append(
                jax.make_array_from_single_device_arrays(spec.shape, spec.sharding, pieces))
        args, kwargs = tree_util.tree_unflatten(in_treedef, leaves)
        result = fun(*args, **kwargs)
        results = tree_util.tree_leaves(result)
        if len(results) != len(out_specs):
            raise ValueError(f"the function returned {len(results)} arrays; its output specs "
                             f"name {len(out_specs)}")
        reply = sidecar_pb2.SidecarReply(code=_OK)
        for o, (value, spec, want) in enumerate(zip(results, out_specs, call.outputs)):
            if not isinstance(value, jax.Array):
                raise TypeError(f"output {o} is a {type(value).__name__}, not a jax.Array")
            if tuple(value.shape) != tuple(spec.shape) or value.dtype != spec.dtype:
                raise ValueError(f"output {o} is {value.dtype}{list(value.shape)}; its spec says "
                                 f"{spec.dtype}{list(spec.shape)}")
            by_device = {shard.device.id: shard for shard in value.addressable_shards}
            out = reply.outputs.add()
            for expected in want.shards:
                local = self.world.to_local[expected.device_id]
                shard = by_device.get(local.id)
                if shard is None:
                    raise ValueError(f"output {o} has no shard on device {expected.device_id}")
                data = self.np.asarray(shard.data)
                if tuple(data.shape) != tuple(expected.dims):
                    raise ValueError(f"output {o}: the shard on device {expected.device_id} is "
                                     f"{list(data.shape)}, its sharding says {list(expected.dims)}")
                item = out.shards.add(device_id=expected.device_id, dtype=expected.dtype,
                                      dims=list(data.shape))
                if expected.dtype == common_pb2.STRING:
                    item.strings.extend(str(s).encode("utf-8") for s in data.reshape(-1))
                elif data.nbytes != expected.bytes:
                    raise ValueError(f"output {o}: the shard on device {expected.device_id} has "
                                     f"{data.nbytes} bytes; the worker expects {expected.bytes}")
                elif data.nbytes:
                    # The one copy: the worker makes the device buffer of these pages.
                    place = self.np.ndarray(data.shape, data.dtype, buffer=outputs,
                                            offset=expected.offset)
                    self.np.copyto(place, data)
                    del place  # before the file's mapping closes
        return reply


def _die_with_parent(channel_fd: int):
    """A sidecar busy in a function must not outlive a worker that dies: a thread watches
    the protocol socket for the worker's end to close (prctl's death signal follows the
    spawning thread, which a gRPC pool may retire; and in its own PID namespace a sandboxed
    sidecar's parent is outside, so getppid() says nothing)."""
    import select

    poller = select.poll()
    poller.register(channel_fd, select.POLLRDHUP)

    def watch():
        while True:
            for _, events in poller.poll():
                if events & (select.POLLRDHUP | select.POLLHUP | select.POLLERR | select.POLLNVAL):
                    os._exit(1)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def _versions(reply):
    import jax

    reply.python_version = sys.version.split()[0]
    reply.jax_version = jax.__version__


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="")
    parser.add_argument("--directory", default="",
                        help="this sidecar's private directory (its arrays, its coordinator)")
    args = parser.parse_args(argv)
    _die_with_parent(0)
    # The protocol keeps the original stdout; everything printed goes to stderr.
    channel_in = socket.socket(fileno=os.dup(0))
    channel_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    world = None
    runner = None
    while True:
        request, fds = _receive(channel_in)
        if request is None:
            break
        reply = sidecar_pb2.SidecarReply(call=request.call)
        try:
            if request.HasField("start"):
                if world is not None:
                    raise RuntimeError("already started")
                hosts = [list(h.device_ids) for h in request.start.hosts]
                world = World(hosts, request.start.host, args.directory)
                runner = Runner(world)
                _versions(reply)
                reply.protocol = _PROTOCOL
            elif runner is None:
                reply.code, reply.message = _FAILED_PRECONDITION, "the sidecar has not started"
            else:
                result = runner.run(request.run, fds)
                result.call = request.call
                reply = result
        except BaseException as e:  # noqa: BLE001 - a user function's error goes to the client
            reply = sidecar_pb2.SidecarReply(call=request.call, code=_UNKNOWN)
            reply.message = "".join(traceback.format_exception(e)).rstrip()
            if isinstance(e, (SystemExit, KeyboardInterrupt)):
                reply.message += "\n(the function tried to exit the sidecar; it keeps running)"
        finally:
            for fd in fds:
                os.close(fd)
        _send(channel_out, reply)
    if world is not None:
        world.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
