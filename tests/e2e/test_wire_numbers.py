"""Every number on the wire is checked before use: boundary values (0, -1, 2^31, 2^32,
2^63, ...) in every numeric field of a set of valid requests, nested messages included
(shardings, compile options, remap plans), each answered with a status. The proxy
process must never exit: `switchyard up` would restart it, so its pid is checked."""

from __future__ import annotations

import copy
from typing import Any

import grpc
import numpy as np
import pytest
from google.protobuf import descriptor as d

import switchyard
from ifrt_raw import RawSession, channel, compile_options_pb2, g, s, t, xla_data_pb2
from switchyard import common_pb2 as c, worker_pb2

INT32 = [0, 1, -1, 2**31 - 1, -2**31]
UINT32 = [0, 1, 2**32 - 1]
INT64 = [0, 1, -1, 2**31, 2**32, 2**32 + 1, 2**62, 2**63 - 1, -2**63]
UINT64 = [0, 1, 2**31, 2**32, 2**63, 2**64 - 1]
VALUES = {
    d.FieldDescriptor.TYPE_INT32: INT32, d.FieldDescriptor.TYPE_SINT32: INT32,
    d.FieldDescriptor.TYPE_SFIXED32: INT32, d.FieldDescriptor.TYPE_ENUM: [0, 1, 99, -1],
    d.FieldDescriptor.TYPE_UINT32: UINT32, d.FieldDescriptor.TYPE_FIXED32: UINT32,
    d.FieldDescriptor.TYPE_INT64: INT64, d.FieldDescriptor.TYPE_SINT64: INT64,
    d.FieldDescriptor.TYPE_SFIXED64: INT64, d.FieldDescriptor.TYPE_UINT64: UINT64,
    d.FieldDescriptor.TYPE_FIXED64: UINT64,
}


def numeric_paths(message, prefix=()):
    """(path, values) for every numeric field set in `message`, and repeated numeric
    fields (a path step is (field name, index or None))."""
    for field, value in message.ListFields():
        if field.type in VALUES:
            if field.is_repeated:
                for index in range(min(len(value), 2)):
                    yield prefix + ((field.name, index),), VALUES[field.type]
                yield prefix + ((field.name, "append"),), VALUES[field.type]
            else:
                yield prefix + ((field.name, None),), VALUES[field.type]
        elif field.type == d.FieldDescriptor.TYPE_MESSAGE:
            if field.is_repeated:
                if value:
                    yield from numeric_paths(value[0], prefix + ((field.name, 0),))
            elif not (field.message_type.has_options and
                      field.message_type.GetOptions().map_entry):
                yield from numeric_paths(value, prefix + ((field.name, None),))


def with_value(message, path, value):
    out = copy.deepcopy(message)
    node = out
    for name, index in path[:-1]:
        node = getattr(node, name) if index is None else getattr(node, name)[index]
    name, index = path[-1]
    if index is None:
        setattr(node, name, value)
    elif index == "append":
        getattr(node, name).append(value)
    else:
        getattr(node, name)[index] = value
    return out


def mutations(message):
    for path, values in numeric_paths(message):
        for value in values:
            try:
                yield with_value(message, path, value)
            except (ValueError, TypeError):
                pass  # out of this field's range in Python; the wire cannot carry it either


def serialized(type_name, message):
    return t.Serialized(type_name=type_name, data=message.SerializeToString())


def hlo_sharding(op, devices=(0, 1)):
    return t.ShardingProto(serialized_sharding=serialized(
        "xla::ifrt::HloSharding",
        t.HloShardingProto(devices=t.DeviceListProto(device_ids=list(devices)),
                           xla_op_sharding=op)))


def tiled(dims=(2, 1), devices=(0, 1)):
    return xla_data_pb2.OpSharding(type=xla_data_pb2.OpSharding.OTHER,
                                   tile_assignment_dimensions=list(dims),
                                   tile_assignment_devices=list(devices))


F32 = t.DTypeProto(kind=t.DTypeProto.KIND_F32)


@pytest.fixture(scope="module")
def cluster():
    with switchyard.LocalCluster(workers=2, devices_per_worker=2) as c:
        yield c


class Client:
    """A raw session with what the templates need: uploads and one real array."""

    def __init__(self, target):
        self.ch = channel(target)
        self.session = RawSession(self.ch)
        init = self.session.request(init_request=s.InitRequest())
        self.session_id = init.init_response.session_id
        self.store = self.ch.stream_unary(
            "/xla.ifrt.proxy.GrpcIfrtService/HostBufferStore",
            request_serializer=g.GrpcHostBufferStoreRequest.SerializeToString,
            response_deserializer=g.GrpcHostBufferStoreResponse.FromString)
        self.next_handle = 1000
        self.array = self.put([4, 2], hlo_sharding(tiled()))
        assert self.array is not None

    def handle(self):
        self.next_handle += 1
        return self.next_handle

    def upload(self, handle, data: bytes):
        metadata = g.GrpcHostBufferStoreMetadata(session_id=self.session_id, handle=handle,
                                                 buffer_size=len(data))
        self.store(iter([g.GrpcHostBufferStoreRequest(data=data)]), metadata=[
            ("ifrt-proxy-grpc-host-buffer-store-metadata-bin", metadata.SerializeToString())])

    def put(self, dims, sharding):
        handle = self.handle()
        self.upload(handle, b"\0" * 32)
        make = s.MakeArrayFromHostBufferRequest(
            dtype=F32, shape=t.ShapeProto(dims=dims), sharding=sharding, host_buffer_handle=handle,
            array_handle=handle)
        r = self.session.request(make_array_from_host_buffer_request=make)
        return handle if r.response_metadata.status.code == 0 else None


def templates(client):
    """(name, builder): builder(mutated message) -> the IfrtRequest fields; the message
    that is mutated is what the builder gets."""
    array = client.array

    def make_array(request):
        client.upload(request.host_buffer_handle, b"\0" * 32)  # each request consumes one
        return dict(make_array_from_host_buffer_request=request)

    def with_upload(request):
        handle = client.handle()
        request = copy.deepcopy(request)
        request.host_buffer_handle = handle
        request.array_handle = handle
        return make_array(request)

    make = s.MakeArrayFromHostBufferRequest(dtype=F32, shape=t.ShapeProto(dims=[4, 2]),
                                            sharding=hlo_sharding(tiled()),
                                            byte_strides=s.ByteStrides(strides=[8, 4]))
    options = compile_options_pb2.CompileOptionsProto()
    build = options.executable_build_options
    build.num_replicas, build.num_partitions = 1, 2
    build.device_assignment.replica_count, build.device_assignment.computation_count = 1, 2
    for device in (0, 1):
        build.device_assignment.computation_devices.add(replica_device_ids=[device])
    spec = t.ArraySpecProto(dtype=F32, shape=t.ShapeProto(dims=[4, 2]),
                            sharding=hlo_sharding(tiled()))
    plan = t.RemapPlanProto(input_specs=[spec], output_specs=[spec])
    plan.input_devices_for_output.add(out_array=0, sources=[t.RemapPlanProto.Source(
        in_array=0, devices=t.DeviceListProto(device_ids=[0, 1]))])
    return [
        ("default device assignment",
         s.GetDefaultDeviceAssignmentRequest(num_replicas=1, num_partitions=1),
         lambda m: dict(get_default_device_assignment_request=m)),
        ("make array", make, with_upload),
        ("make array: sharding", tiled(),
         lambda op: with_upload(s.MakeArrayFromHostBufferRequest(
             dtype=F32, shape=t.ShapeProto(dims=[4, 2]), sharding=hlo_sharding(op)))),
        ("make array: iota sharding", xla_data_pb2.OpSharding(
            type=xla_data_pb2.OpSharding.OTHER, tile_assignment_dimensions=[2, 1],
            iota_reshape_dims=[2], iota_transpose_perm=[0]),
         lambda op: with_upload(s.MakeArrayFromHostBufferRequest(
             dtype=F32, shape=t.ShapeProto(dims=[4, 2]), sharding=hlo_sharding(op)))),
        ("copy arrays", s.CopyArraysRequest(array_handles=[array], device_ids=[1, 0],
                                            result_handles=[1]),
         lambda m: dict(copy_arrays_request=m)),
        ("reshard", s.ReshardArraysRequest(array_handles=[array], array_specs=[spec],
                                           result_handles=[2]),
         lambda m: dict(reshard_arrays_request=m)),
        ("disassemble", s.DisassembleIntoSingleDeviceArraysRequest(
            array_handle=array, result_handles=[3, 4]),
         lambda m: dict(disassemble_into_single_device_arrays_request=m)),
        ("fetch", s.CopyToHostBufferRequest(array_handle=array, host_buffer_handle=5,
                                            byte_strides=s.ByteStrides(strides=[8, 4])),
         lambda m: dict(copy_to_host_buffer_request=m)),
        ("ready", s.CheckValueReadyRequest(value_handles=[array]),
         lambda m: dict(check_value_ready_request=m)),
        ("compile options", options,
         lambda o: dict(compile_request=s.CompileRequest(
             program=t.Serialized(type_name="xla::ifrt::XlaProgram", data=b"\0not mlir"),
             compile_options=serialized("xla::ifrt::XlaCompileOptions",
                                        t.XlaCompileOptionsProto(compile_options=o.SerializeToString()))))),
        ("remap plan", plan,
         lambda p: dict(remap_arrays_request=s.RemapArraysRequest(
             plan=p.SerializeToString(), array_handles=[array], result_handles=[6]))),
        ("layout", s.GetDefaultLayoutRequest(dims=[4, 2], device_id=0),
         lambda m: dict(get_default_layout_request=m)),
    ]


def test_boundary_values_in_every_numeric_field_get_a_status(cluster):
    proxy_pid = cluster.child_pid("proxy")
    client = Client(cluster.target)
    sent = 0
    codes: dict[grpc.StatusCode, int] = {}
    for _name, message, build in templates(client):
        for mutated in mutations(message):
            response = client.session.request(**build(mutated))
            code = response.response_metadata.status.code
            codes[code] = codes.get(code, 0) + 1
            sent += 1
    assert sent >= 300, sent
    # Most are refused; none may crash or hang the proxy (each got its answer above).
    assert codes.get(grpc.StatusCode.UNKNOWN.value[0], 0) == 0, codes
    assert codes.get(grpc.StatusCode.INTERNAL.value[0], 0) == 0, codes
    client.session.close()
    assert cluster.child_pid("proxy") == proxy_pid, "the proxy restarted: it crashed"
    fresh = RawSession(channel(cluster.target))
    assert fresh.request(init_request=s.InitRequest()).response_metadata.status.code == 0
    fresh.close()


def test_the_two_crash_repros_are_refused(cluster):
    proxy_pid = cluster.child_pid("proxy")
    client = Client(cluster.target)
    huge = client.session.request(get_default_device_assignment_request=(
        s.GetDefaultDeviceAssignmentRequest(num_replicas=2**32, num_partitions=2**32)))
    assert huge.response_metadata.status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    negative = client.put([4, 2], hlo_sharding(tiled(dims=(-1, 1))))
    assert negative is None
    response = client.session.request(is_array_deleted_request=s.IsArrayDeletedRequest(
        array_handle=client.next_handle))
    assert "tile assignment" in response.response_metadata.status.message, response
    client.session.close()
    assert cluster.child_pid("proxy") == proxy_pid


WORKER_CHUNK = worker_pb2.PutBufferChunk


def worker_put(ch):
    """A worker's PutBuffer on channel `ch`: called with an iterator of chunks."""
    return ch.stream_unary("/switchyard.Worker/PutBuffer",
                           request_serializer=WORKER_CHUNK.SerializeToString,
                           response_deserializer=worker_pb2.PutBufferResponse.FromString)


def worker_dispatch(ch):
    """A worker's Dispatch stream on channel `ch`: called with an iterator of operations."""
    return ch.stream_stream("/switchyard.Worker/Dispatch",
                            request_serializer=worker_pb2.DispatchRequest.SerializeToString,
                            response_deserializer=worker_pb2.DispatchResponse.FromString)


def test_worker_refuses_boundary_values_in_headers_and_pieces(cluster):
    """The same for a worker's own API (what a proxy or a peer sends)."""
    address = cluster.worker_addresses()[0]
    header = worker_pb2.BufferHeader(buffer_id=77, device_id=0, dtype=c.F32, dims=[2, 2],
                                     size_bytes=16)
    pieces = worker_pb2.AssembleBufferRequest(
        header=worker_pb2.BufferHeader(buffer_id=78, device_id=0, dtype=c.F32, dims=[2, 2],
                                       size_bytes=16),
        pieces=[worker_pb2.BufferPiece(source_buffer_id=77, source_start=[0, 0], size=[2, 2],
                                       dest_start=[0, 0])])
    ch = grpc.insecure_channel(address)
    put = worker_put(ch)
    put(iter([WORKER_CHUNK(header=header, data=b"\0" * 16)]), timeout=10)
    dispatch = worker_dispatch(ch)
    worker_pid = cluster.child_pid("worker", 0)
    sent = 0
    for mutated in mutations(header):
        mutated.buffer_id = 1000 + sent
        try:
            put(iter([WORKER_CHUNK(header=mutated, data=b"\0" * 16)]), timeout=10)
        except grpc.RpcError as e:
            assert e.code() not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), e
        sent += 1
    requests: list[Any] = []
    for mutated in mutations(pieces):
        mutated.header.buffer_id = 5000 + len(requests)
        requests.append(worker_pb2.DispatchRequest(seq=len(requests) + 1, assemble=mutated,
                                                   reply=True))
    answers = list(dispatch(iter(requests), timeout=60))
    assert len(answers) == len(requests)
    assert all(a.code not in (2, 13) for a in answers), [a for a in answers if a.code in (2, 13)]
    assert sent + len(requests) >= 100
    assert cluster.child_pid("worker", 0) == worker_pid, "the worker restarted: it crashed"


def test_worker_makes_a_batch_of_buffers_and_refuses_an_oversized_one(cluster):
    """DispatchRequest.assemble_buffers (how a proxy moves many arrays at once): each
    buffer is made as a lone assemble would make it, a bad one fails alone and its
    failure answers the batch, and a batch over the bound is refused whole."""
    address = cluster.worker_addresses()[0]
    ch = grpc.insecure_channel(address)
    put = worker_put(ch)
    values = np.arange(4, dtype=np.float32)
    put(iter([WORKER_CHUNK(header=worker_pb2.BufferHeader(
        buffer_id=90, device_id=0, dtype=c.F32, dims=[2, 2], size_bytes=16),
        data=values.tobytes())]), timeout=10)

    def make(buffer_id, **piece):
        return worker_pb2.AssembleBufferRequest(
            header=worker_pb2.BufferHeader(buffer_id=buffer_id, device_id=0, dtype=c.F32,
                                           dims=[2, 2], size_bytes=16),
            pieces=[worker_pb2.BufferPiece(source_buffer_id=90, **piece)])

    batch = worker_pb2.AssembleBuffersRequest(buffers=[
        make(91),  # a copy
        make(92, source_start=[0, 0], size=[2, 2], dest_start=[0, 0]),  # a reshard's piece
        make(93, source_start=[0, 0], size=[1, 2], dest_start=[1, 0]),  # half of it
        make(94, source_start=[3, 0], size=[2, 2], dest_start=[0, 0])])  # outside: refused
    oversized = worker_pb2.AssembleBuffersRequest(
        buffers=[make(900_000 + i) for i in range(257)])  # ids no other test here uses
    dispatch = worker_dispatch(ch)
    answers = list(dispatch(iter([
        worker_pb2.DispatchRequest(seq=1, assemble_buffers=batch, reply=True),
        worker_pb2.DispatchRequest(seq=2, assemble_buffers=oversized, reply=True)]), timeout=60))
    assert [a.code for a in answers] == [grpc.StatusCode.INVALID_ARGUMENT.value[0]] * 2, answers
    assert "outside" in answers[0].message and "at most 256" in answers[1].message, answers
    get = ch.unary_stream("/switchyard.Worker/GetBuffer",
                          request_serializer=worker_pb2.GetBufferRequest.SerializeToString,
                          response_deserializer=worker_pb2.GetBufferChunk.FromString)

    def read(buffer_id):
        chunks = list(get(worker_pb2.GetBufferRequest(buffer_id=buffer_id), timeout=10))
        return np.frombuffer(b"".join(ch.data for ch in chunks), np.float32)

    np.testing.assert_array_equal(read(91), values)
    np.testing.assert_array_equal(read(92), values)
    np.testing.assert_array_equal(read(93), [0, 0, 0, 1])
    for missing in (94, 900_000):
        with pytest.raises(grpc.RpcError) as failed:
            read(missing)
        assert failed.value.code() in (grpc.StatusCode.NOT_FOUND,
                                       grpc.StatusCode.INVALID_ARGUMENT), failed.value


def test_worker_reads_a_small_buffer_on_the_stream_and_refuses_what_it_cannot(cluster):
    """DispatchRequest.read_buffer (how a proxy fetches a small array): the answer carries
    the bytes; an unknown id, a buffer over limits::kStreamReadMaxBytes (256 KiB) and a
    string array's shard are refused with a status, and the stream goes on."""
    address = cluster.worker_addresses()[0]
    ch = grpc.insecure_channel(address)
    put = worker_put(ch)
    small = np.arange(6, dtype=np.int32)
    big = 256 * 1024 // 4 + 1  # one element past the bound
    for buffer_id, values in ((950_001, small), (950_002, np.zeros(big, np.float32))):
        put(iter([WORKER_CHUNK(header=worker_pb2.BufferHeader(
            buffer_id=buffer_id, device_id=0, dtype=c.S32 if values.dtype == np.int32 else c.F32,
            dims=[values.size], size_bytes=values.nbytes), data=values.tobytes())]), timeout=10)
    dispatch = worker_dispatch(ch)

    def read(seq, buffer_id):
        return worker_pb2.DispatchRequest(
            seq=seq, read_buffer=worker_pb2.ReadBufferRequest(buffer_id=buffer_id))

    answers = {a.seq: a for a in dispatch(iter([
        read(1, 950_001), read(2, 950_002), read(3, 950_999), read(4, 2**64 - 1),
        read(5, 950_001)]), timeout=60)}
    assert sorted(answers) == [1, 2, 3, 4, 5], answers
    for seq in (1, 5):
        assert answers[seq].code == 0, answers[seq]
        np.testing.assert_array_equal(np.frombuffer(answers[seq].data, np.int32), small)
    assert answers[2].code == grpc.StatusCode.INVALID_ARGUMENT.value[0], answers[2]
    assert "at most 262144" in answers[2].message and not answers[2].data, answers[2]
    for seq in (3, 4):
        assert answers[seq].code == grpc.StatusCode.NOT_FOUND.value[0], answers[seq]


def test_worker_offers_many_buffers_at_once_and_says_why_not_for_each(cluster):
    """Worker.OfferBuffers (how a worker asks a peer for a batch's bytes): a buffer from
    the data plane's floor (512 KiB) gets its header and an offer; a smaller one
    FAILED_PRECONDITION (read it inline), an unknown one NOT_FOUND, each in its place;
    more than 256 reads are refused whole."""
    address = cluster.worker_addresses()[0]
    ch = grpc.insecure_channel(address)
    put = worker_put(ch)
    for buffer_id, n in ((960_001, 2**17), (960_002, 16)):
        put(iter([WORKER_CHUNK(header=worker_pb2.BufferHeader(
            buffer_id=buffer_id, device_id=0, dtype=c.F32, dims=[n], size_bytes=4 * n),
            data=b"\0" * (4 * n))]), timeout=10)
    offer = ch.unary_unary("/switchyard.Worker/OfferBuffers",
                           request_serializer=worker_pb2.OfferBuffersRequest.SerializeToString,
                           response_deserializer=worker_pb2.OfferBuffersResponse.FromString)
    answer = offer(worker_pb2.OfferBuffersRequest(reads=[
        worker_pb2.GetBufferRequest(buffer_id=i, bulk=True)
        for i in (960_001, 960_002, 960_999)]), timeout=30)
    big, small, unknown = answer.offers
    assert big.code == 0 and big.header.size_bytes == 2**19 and len(big.offer.ticket) == 16, big
    assert small.code == grpc.StatusCode.FAILED_PRECONDITION.value[0], small
    assert unknown.code == grpc.StatusCode.NOT_FOUND.value[0], unknown
    with pytest.raises(grpc.RpcError) as refused:
        offer(worker_pb2.OfferBuffersRequest(reads=[
            worker_pb2.GetBufferRequest(buffer_id=960_001)] * 257), timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value
