"""The proxy against inputs a stock client never sends: version ranges it cannot
serve, malformed and out-of-order requests, unknown handles, host-buffer RPCs
for sessions that do not exist, and clients that die mid-session."""

import os
import random
import signal
import subprocess
import sys
import time

import grpc
import pytest

import switchyard
from conftest import metric_at, read_line, tell, wait_until, worker_buffers, worker_stat
from ifrt_raw import (
    SERVICE,
    OpenUpload,
    RawSession,
    channel,
    g,
    get_version,
    host_buffer_lookup,
    host_buffer_store,
    s,
    store_metadata,
    t,
)

OK = 0


@pytest.fixture(scope="module")
def cluster():
    with switchyard.LocalCluster(workers=2, devices_per_worker=4, metrics=True) as c:
        yield c


def wait_for_host_buffer_waits(cluster, kind: str) -> None:
    """Until a request of the proxy waits on a host buffer (`kind`: upload_to_begin,
    bytes_to_arrive), which the proxy announces nowhere but in its /metrics."""
    sample = f'switchyard_proxy_host_buffer_waits{{kind="{kind}"}}'
    url = cluster.metrics["proxy"]
    wait_until(lambda: metric_at(url, sample) > 0, timeout=30,
               what=f"a wait of kind {kind} on the proxy", interval=0.02)


def status(response):
    return response.response_metadata.status.code


def test_version_is_the_highest_both_speak(cluster):
    ch = channel(cluster.target)
    version = get_version(ch)
    assert (version.protocol_version, version.ifrt_serdes_version_number) == (25, 6)
    version = get_version(ch, max_protocol=20, max_serdes=4)
    assert (version.protocol_version, version.ifrt_serdes_version_number) == (20, 4)


def test_version_out_of_range_is_refused_naming_both_ranges(cluster):
    with pytest.raises(grpc.RpcError) as e:
        get_version(channel(cluster.target), min_protocol=30, max_protocol=31)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "30..31" in e.value.details() and "16..25" in e.value.details()


def test_session_without_metadata_is_refused(cluster):
    call = channel(cluster.target).stream_stream(
        "/xla.ifrt.proxy.GrpcIfrtService/IfrtSession", request_serializer=lambda b: b,
        response_deserializer=s.IfrtResponse.FromString)
    with pytest.raises(grpc.RpcError) as e:
        list(call(iter([b""])))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def single_device(device_id):
    """The sharding of an array on one device, as the client sends it."""
    return t.ShardingProto(serialized_sharding=t.Serialized(
        type_name="xla::ifrt::SingleDeviceSharding",
        data=t.SingleDeviceShardingProto(device_id=device_id).SerializeToString()))


def one_shard_request(array_handle, host_buffer_handle, dims):
    """A MakeArraysFromHostBufferShards request: one f32 array on device 0, its one
    shard from one host buffer."""
    f32 = t.DTypeProto(kind=t.DTypeProto.KIND_F32)
    shape = t.ShapeProto(dims=dims)
    Shards = s.MakeArraysFromHostBufferShardsRequest
    return dict(make_arrays_from_host_buffer_shards_request=Shards(
        array_handles=[array_handle], specs=[Shards.MakeArraysFromHostBufferShardsSpec(
            addressable_shard_indices=[Shards.ShardIndices(indices=[0])],
            host_buffers=[Shards.HostBuffer(dtype=f32, shape=shape,
                                            host_buffer_handle=host_buffer_handle)],
            array_spec=t.ArraySpecProto(dtype=f32, shape=shape, sharding=single_device(0)))]))


def half_sent_array(cluster, handle, op_id):
    """A session, and a request for a 12 MiB array from an upload still open with 5 MiB
    sent, once the forward to the worker waits for the rest: (session, upload, the
    worker's buffer count before)."""
    ch = channel(cluster.target)
    session = RawSession(ch)
    session_id = session.request(init_request=s.InitRequest()).init_response.session_id
    size = 12 << 20
    upload = OpenUpload(ch, session_id, handle, size)
    upload.send(b"\1" * (5 << 20))
    before = worker_buffers(cluster)
    send_u8_array(session, op_id=op_id, handle=handle, size=size)
    wait_for_host_buffer_waits(cluster, "bytes_to_arrive")
    return session, upload, before


def half_read_fetch(ch, session, session_id, handle, timeout):
    """Uploads a 24 MiB array (`handle`), fetches it into host buffer `handle` + 1 and
    reads the first chunk of its lookup, then no more: the lookup's call (to cancel)."""
    size = 24 << 20
    upload = OpenUpload(ch, session_id, handle, size)
    for _ in range(size >> 22):
        upload.send(b"\1" * (4 << 20))
    assert upload.end() is None
    send_u8_array(session, op_id=100, handle=handle, size=size)
    assert status(session.next_response()) == OK
    fetched = session.request(copy_to_host_buffer_request=s.CopyToHostBufferRequest(
        host_buffer_handle=handle + 1, array_handle=handle))
    assert status(fetched) == OK, fetched
    chunks = host_buffer_lookup(ch)(
        g.GrpcHostBufferLookupRequest(session_id=session_id, handle=handle + 1), timeout=timeout)
    assert len(next(chunks).data) > 0
    return chunks


def send_u8_array(session, op_id, handle, size):
    """MakeArrayFromHostBuffer of `size` bytes on device 0, not waiting for its response."""
    session.send_bytes(s.IfrtRequest(
        request_metadata=s.RequestMetadata(op_id=op_id),
        make_array_from_host_buffer_request=s.MakeArrayFromHostBufferRequest(
            dtype=t.DTypeProto(kind=t.DTypeProto.KIND_U8), shape=t.ShapeProto(dims=[size]),
            sharding=single_device(0), host_buffer_handle=handle,
            array_handle=handle)).SerializeToString())


def random_bad_request(rng, session_id):
    """A well-formed request that must fail: unknown handles, bad specs, unsupported ops."""
    h = rng.choice([0, 1, 7, 123456, (1 << 48) + 5, (1 << 64) - 16])
    single = single_device(rng.choice([0, 3, 99]))
    choices = [
        dict(copy_to_host_buffer_request=s.CopyToHostBufferRequest(array_handle=h,
                                                                   host_buffer_handle=h + 1)),
        dict(check_value_ready_request=s.CheckValueReadyRequest(value_handles=[h, h + 2])),
        dict(check_future_request=s.CheckFutureRequest(future_handle=h)),
        dict(disassemble_into_single_device_arrays_request=s.DisassembleIntoSingleDeviceArraysRequest(
            array_handle=h, result_handles=[h + 1])),
        dict(copy_arrays_request=s.CopyArraysRequest(array_handles=[h], device_ids=[1],
                                                     result_handles=[h + 1])),
        dict(fully_replicated_shard_request=s.FullyReplicatedShardRequest(array_handle=h,
                                                                          result_handle=h + 1)),
        dict(is_array_deleted_request=s.IsArrayDeletedRequest(array_handle=h)),
        dict(destruct_array_request=s.DestructArrayRequest(array_handle=[h])),
        dict(loaded_executable_metadata_request=s.LoadedExecutableMetadataRequest(
            loaded_executable_handle=h)),
        dict(loaded_executable_execute_request=s.LoadedExecutableExecuteRequest(
            loaded_executable_handle=h, args_handles=[h])),
        dict(loaded_executable_destruct_request=s.LoadedExecutableDestructRequest(
            loaded_executable_handle=h)),
        dict(assemble_array_from_single_device_arrays_request=
             s.AssembleArrayFromSingleDeviceArraysRequest(
                 sharding=single, single_device_array_handles=[h], result_handle=h + 3)),
        dict(compile_request=s.CompileRequest(program=t.Serialized(type_name="xla::ifrt::XlaProgram",
                                                                   data=b"\x00not mlir"))),
        dict(compile_request=s.CompileRequest(program=t.Serialized(type_name="nonsense"))),
        dict(remap_arrays_request=s.RemapArraysRequest(array_handles=[h])),
        dict(make_error_arrays_request=s.MakeErrorArraysRequest(array_handles=[h + 9])),
        dict(get_default_device_assignment_request=s.GetDefaultDeviceAssignmentRequest(
            num_replicas=64, num_partitions=64)),
        dict(make_arrays_from_host_buffer_shards_request=s.MakeArraysFromHostBufferShardsRequest(
            array_handles=[1, 2])),
        dict(get_default_layout_request=s.GetDefaultLayoutRequest(
            dims=rng.choice([[4, -3], [1 << 62, 1 << 62]]), device_id=0)),
        dict(make_array_from_host_buffer_request=s.MakeArrayFromHostBufferRequest(
            dtype=t.DTypeProto(kind=t.DTypeProto.KIND_F32), shape=t.ShapeProto(dims=[-3]),
            sharding=single, host_buffer_handle=h + 4, array_handle=h + 5)),
    ]
    return rng.choice(choices)


def test_hundreds_of_bad_requests_get_errors_and_the_proxy_stays_up(cluster):
    rng = random.Random(1234)
    session = RawSession(channel(cluster.target))
    # Out of order: array requests before Init.
    assert status(session.request(copy_to_host_buffer_request=s.CopyToHostBufferRequest(
        array_handle=5, host_buffer_handle=6))) == grpc.StatusCode.NOT_FOUND.value[0]
    init = session.request(init_request=s.InitRequest())
    assert status(init) == OK and len(init.init_response.all_devices) == 8
    assert status(session.request(init_request=s.InitRequest())) != OK  # twice
    assert status(session.request()) == grpc.StatusCode.INVALID_ARGUMENT.value[0]  # no request
    unimplemented = session.request(bitcast_arrays_request=s.BitcastArraysRequest())
    assert status(unimplemented) == grpc.StatusCode.UNIMPLEMENTED.value[0]
    assert "bitcast_arrays_request" in unimplemented.response_metadata.status.message
    for _ in range(300):
        response = session.request(**random_bad_request(rng, init.init_response.session_id))
        # Failed requests bind their error to the handles they name, and dropping such a
        # handle (destruct) is fine; everything else here must fail.
        if response.WhichOneof("response") == "destruct_array_response":
            continue
        assert status(response) != OK, response
        assert response.WhichOneof("response") is None
    session.close()

    # Bytes that do not parse end that stream with INVALID_ARGUMENT saying so; bytes
    # the parser takes as unknown fields get an error answer. Never the proxy.
    for garbage, parses in ((b"\x12\xff\x01", False), (b"\x10\x01", True),
                            (b"\xff\xff\xff\xff", False), (b"\x0a\x02\x09", False)):
        broken = RawSession(channel(cluster.target))
        broken.send_bytes(garbage)
        if parses:
            assert status(broken.next_response()) == grpc.StatusCode.INVALID_ARGUMENT.value[0]
            broken.cancel()
            continue
        with pytest.raises(grpc.RpcError) as e:
            broken.next_response()
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value
        assert "request 1 of the session" in e.value.details()
        assert "is not an IfrtRequest" in e.value.details()
    # The same after a good request: the count says which one.
    later = RawSession(channel(cluster.target))
    assert status(later.request(init_request=s.InitRequest())) == OK
    later.send_bytes(b"\x0a\x05\x08")
    with pytest.raises(grpc.RpcError) as e:
        later.next_response()
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "request 2 of the session (3 bytes)" in e.value.details()

    # A call of one request that does not parse: INVALID_ARGUMENT naming the method
    # (gRPC's own answer is INTERNAL with no message).
    ch = channel(cluster.target)
    for method, call in (("GetVersion", ch.unary_unary), ("HostBufferDelete", ch.unary_unary),
                         ("HostBufferLookup", ch.unary_stream)):
        stub = call("/xla.ifrt.proxy.GrpcIfrtService/" + method,
                    request_serializer=lambda b: b, response_deserializer=lambda b: b)
        with pytest.raises(grpc.RpcError) as e:
            list(stub(b"\x0a\xff\x01", timeout=10)) if call == ch.unary_stream else \
                stub(b"\x0a\xff\x01", timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, e.value)
        assert method in e.value.details()
    fresh = RawSession(channel(cluster.target))
    assert status(fresh.request(init_request=s.InitRequest())) == OK
    fresh.close()


def test_truncated_requests_to_workers_and_the_rm_are_invalid_arguments(cluster):
    """Every Switchyard server answers a request that does not parse with INVALID_ARGUMENT
    naming the method, and goes on serving."""
    targets = [(cluster.rm_address, "/switchyard.ResourceManager/", ("GetFleet", "KeyValueGet")),
               (cluster.worker_addresses()[0], "/switchyard.Worker/", ("GetInfo", "Execute"))]
    for address, service, methods in targets:
        ch = grpc.insecure_channel(address)
        for method in methods:
            stub = ch.unary_unary(service + method, request_serializer=lambda b: b,
                                  response_deserializer=lambda b: b)
            with pytest.raises(grpc.RpcError) as e:
                stub(b"\x0a\xff\x01", timeout=10)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, e.value)
            assert method in e.value.details()
        assert ch.unary_unary(service + methods[0], request_serializer=lambda b: b,
                              response_deserializer=lambda b: b)(b"", timeout=10) is not None


def test_host_buffer_rpcs_check_the_session(cluster):
    ch = channel(cluster.target)
    stub_lookup = host_buffer_lookup(ch)
    with pytest.raises(grpc.RpcError) as e:
        list(stub_lookup(g.GrpcHostBufferLookupRequest(session_id=42, handle=1)))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    store = host_buffer_store(ch)
    with pytest.raises(grpc.RpcError) as e:
        store(iter([g.GrpcHostBufferStoreRequest(data=b"abc")]))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # no metadata

    session = RawSession(ch)
    session_id = session.request(init_request=s.InitRequest()).init_response.session_id
    with pytest.raises(grpc.RpcError) as e:
        store(iter([g.GrpcHostBufferStoreRequest(data=b"abc")]),
              metadata=store_metadata(session_id, 9, 10))
    assert e.value.code() == grpc.StatusCode.DATA_LOSS
    # A chunk that is not a GrpcHostBufferStoreRequest (data cut short): INVALID_ARGUMENT,
    # and the handle is free again.
    raw_store = ch.stream_unary(SERVICE + "HostBufferStore", request_serializer=lambda b: b,
                                response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as e:
        raw_store(iter([b"\x0a\x05ab"]), metadata=store_metadata(session_id, 10, 5), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value
    assert "GrpcHostBufferStoreRequest" in e.value.details()
    # Chunks of odd sizes, unknown fields among them, come back byte for byte.
    data = bytes(range(256)) * 4099
    pieces = [data[:1], data[1:70000], data[70000:70000], data[70000:]]
    chunks = [g.GrpcHostBufferStoreRequest(data=p).SerializeToString() for p in pieces]
    chunks[1] = b"\x38\x05" + chunks[1]  # field 7, a varint: a newer client's field
    raw_store(iter(chunks), metadata=store_metadata(session_id, 10, len(data)), timeout=30)
    stub_lookup = host_buffer_lookup(ch)
    back = b"".join(r.data for r in stub_lookup(
        g.GrpcHostBufferLookupRequest(session_id=session_id, handle=10), timeout=30))
    assert back == data
    session.close()


def test_client_waiting_on_a_missing_upload_can_leave(cluster):
    session = RawSession(channel(cluster.target))
    session.request(init_request=s.InitRequest())
    f32 = t.DTypeProto(kind=t.DTypeProto.KIND_F32)
    sharding = single_device(0)
    # Asks for an array from a host buffer that is never uploaded, then goes away.
    session.send_bytes(s.IfrtRequest(
        request_metadata=s.RequestMetadata(op_id=99),
        make_array_from_host_buffer_request=s.MakeArrayFromHostBufferRequest(
            dtype=f32, shape=t.ShapeProto(dims=[4]), sharding=sharding, host_buffer_handle=77,
            array_handle=77)).SerializeToString())
    wait_for_host_buffer_waits(cluster, "upload_to_begin")
    session.cancel()
    # The proxy notices and serves the next client at once.
    fresh = RawSession(channel(cluster.target))
    assert status(fresh.request(init_request=s.InitRequest())) == OK
    fresh.close()


def test_a_request_naming_an_upload_never_stored_fails_and_the_session_goes_on(cluster):
    # One request naming a host buffer that never comes must not wedge the session: it
    # gets NOT_FOUND once the upload has had time to begin, and the next request its answer.
    session = RawSession(channel(cluster.target))
    session.request(init_request=s.InitRequest())
    sharding = single_device(0)
    started = time.monotonic()
    missing = session.request(**one_shard_request(41, 4141, [4]))
    waited = time.monotonic() - started
    assert status(missing) == grpc.StatusCode.NOT_FOUND.value[0], missing
    assert "host buffer 4141 was never stored" in missing.response_metadata.status.message
    assert waited < 60, waited  # the bound is 20 s
    after = session.request(is_array_deleted_request=s.IsArrayDeletedRequest(array_handle=41))
    assert after.WhichOneof("response") is not None or status(after) != OK
    # A malformed request fails at once instead of waiting for its upload first.
    started = time.monotonic()
    bad = session.request(make_array_from_host_buffer_request=s.MakeArrayFromHostBufferRequest(
        dtype=t.DTypeProto(kind=t.DTypeProto.KIND_F32), shape=t.ShapeProto(dims=[-3]),
        sharding=sharding, host_buffer_handle=4242, array_handle=42))
    assert status(bad) == grpc.StatusCode.INVALID_ARGUMENT.value[0], bad
    assert time.monotonic() - started < 5
    assert status(session.request(init_request=s.InitRequest())) != OK  # still answering
    session.close()


def test_a_shard_whose_upload_is_the_wrong_size_is_refused_before_its_bytes_arrive(cluster):
    # 8 bytes declared for a shard of four f32 (16): refused at once, while the upload is
    # still open, instead of after the proxy waited for (and staged) all of it.
    ch = channel(cluster.target)
    session = RawSession(ch)
    session_id = session.request(init_request=s.InitRequest()).init_response.session_id
    upload = OpenUpload(ch, session_id, 43, 8, timeout=60)
    upload.send(b"\1" * 4)
    started = time.monotonic()
    wrong = session.request(**one_shard_request(43, 43, [4]))
    assert status(wrong) == grpc.StatusCode.INVALID_ARGUMENT.value[0], wrong
    assert wrong.response_metadata.status.message == (
        "host buffer 43 has 8 bytes; shard 0 of array 43 needs 16")
    assert time.monotonic() - started < 5
    upload.end()  # the request let go of it: how the upload ends is not the point
    assert status(session.request(get_default_device_assignment_request=(
        s.GetDefaultDeviceAssignmentRequest(num_replicas=1, num_partitions=1)))) == OK
    session.close()


def test_default_layout_of_a_shape_or_device_that_cannot_be_is_refused(cluster):
    session = RawSession(channel(cluster.target))
    session.request(init_request=s.InitRequest())
    ok = session.request(get_default_layout_request=s.GetDefaultLayoutRequest(
        dims=[4, 2], device_id=0))
    assert status(ok) == OK and ok.get_default_layout_response.serialized_pjrt_layout == b"{1,0}"
    for dims, device in (([4, -3], 0), ([1 << 62, 1 << 62], 0), ([4], 999)):
        refused = session.request(get_default_layout_request=s.GetDefaultLayoutRequest(
            dims=dims, device_id=device))
        assert status(refused) == grpc.StatusCode.INVALID_ARGUMENT.value[0], (dims, device)
    session.close()


KILLED_CLIENT = """
import numpy as np, jax, switchyard
switchyard.initialize()
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
xs = [jax.device_put(np.ones((8, 8), np.float32), NamedSharding(mesh, P("x"))) for _ in range(5)]
ys = [jax.jit(lambda v: v * 2)(x) for x in xs]
z = jax.device_put(np.ones(3), jax.devices()[6])
jax.block_until_ready(ys)
print("READY", flush=True)
import time; time.sleep(600)
"""


def test_killed_client_frees_everything_on_the_workers(cluster):
    env = {**os.environ, **cluster.env()}
    client = subprocess.Popen([sys.executable, "-c", KILLED_CLIENT], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert read_line(client).strip() == "READY"

        assert worker_buffers(cluster) >= 41  # 5 x 4 shards in, 5 x 4 out, 1 on slice 1
        client.send_signal(signal.SIGKILL)
        client.wait()
        deadline = time.monotonic() + 15
        while worker_buffers(cluster) != 0:
            assert time.monotonic() < deadline, (f"{worker_buffers(cluster)} buffers left after "
                                                 "the client died")
            time.sleep(0.2)
    finally:
        client.kill()


IDLE_CLIENT = """
import gc, sys, numpy as np, jax, switchyard
switchyard.initialize()
xs = [jax.device_put(np.ones(1000, np.float32), d) for d in jax.devices()[:3]]
jax.block_until_ready(xs)
print("READY", flush=True)
sys.stdin.readline()
del xs
gc.collect()
print("DROPPED", flush=True)
sys.stdin.readline()
"""


def test_dropped_arrays_are_freed_while_the_client_stays_quiet(cluster):
    # Deletions ride with the next operation to a worker; a client that sends none
    # still gets its dropped arrays freed within a few milliseconds.
    env = {**os.environ, **cluster.env()}
    client = subprocess.Popen([sys.executable, "-c", IDLE_CLIENT], env=env, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    try:
        assert read_line(client).strip() == "READY"
        before = worker_buffers(cluster)
        assert before >= 3
        tell(client, "drop")
        assert read_line(client).strip() == "DROPPED"
        deadline = time.monotonic() + 5
        while worker_buffers(cluster) > before - 3:
            assert time.monotonic() < deadline, (f"{worker_buffers(cluster)} buffers, {before} "
                                                 "before the drop")
            time.sleep(0.05)
    finally:
        client.kill()


def test_array_from_an_upload_that_fails_midway_gets_its_error_and_leaves_nothing(cluster):
    # The proxy forwards an upload to its worker while it arrives; if the upload then
    # ends short, the array gets DATA_LOSS and the worker keeps no partial buffer.
    # The first chunks went on to the worker; the forward waits for the rest ...
    session, upload, before = half_sent_array(cluster, handle=41, op_id=7)
    assert upload.end() == grpc.StatusCode.DATA_LOSS  # ... and the upload ends short
    response = session.next_response()
    assert response.response_metadata.op_id == 7
    assert status(response) == grpc.StatusCode.DATA_LOSS.value[0], response
    # The session goes on, and the worker holds nothing from the failed upload.
    assert status(session.request(get_default_device_assignment_request=(
        s.GetDefaultDeviceAssignmentRequest(num_replicas=1, num_partitions=1)))) == OK
    wait_until(lambda: worker_buffers(cluster) <= before, timeout=5,
               what="the partial buffer freed on the worker", interval=0.05)
    session.close()


def test_a_session_that_ends_while_its_upload_stays_open_stops_waiting_for_it(cluster):
    # The client goes away mid-array while its upload's RPC stays open and silent: the
    # worker's pull of the array stops at once (not after the 600 s idle bound), and the
    # session ends, freeing what it staged and what the worker started to store.
    session, upload, before = half_sent_array(cluster, handle=45, op_id=9)
    url = cluster.metrics["proxy"]
    session.cancel()
    try:
        wait_until(lambda: metric_at(url, "switchyard_proxy_sessions") == 0, timeout=20,
                   what="the session ended", interval=0.05)
        waits = 'switchyard_proxy_host_buffer_waits{kind="bytes_to_arrive"}'
        wait_until(lambda: metric_at(url, waits) == 0, timeout=5,
                   what="no wait left on the upload", interval=0.05)
        assert metric_at(url, "switchyard_proxy_host_buffer_bytes") == 0
        wait_until(lambda: worker_buffers(cluster) <= before, timeout=10,
                   what="the partial buffer freed on the worker", interval=0.05)
    finally:
        upload.end()  # the session's end ended it: how is not the point
    fresh = RawSession(channel(cluster.target))
    assert status(fresh.request(init_request=s.InitRequest())) == OK
    fresh.close()


def test_a_session_that_ends_while_its_fetch_is_not_read_lets_go_of_it(cluster):
    # The client stops reading a fetch's lookup, then its session ends: the lookup call
    # ends with the session (not when the client's own deadline comes), and the bytes it
    # held are let go at once.
    ch = channel(cluster.target)
    session = RawSession(ch)
    session_id = session.request(init_request=s.InitRequest()).init_response.session_id
    chunks = half_read_fetch(ch, session, session_id, handle=46, timeout=300)
    url = cluster.metrics["proxy"]
    session.cancel()
    try:
        wait_until(lambda: metric_at(url, "switchyard_proxy_sessions") == 0, timeout=20,
                   what="the session ended", interval=0.05)
        wait_until(lambda: metric_at(url, "switchyard_proxy_host_buffer_bytes") == 0,
                   timeout=10, what="the fetch's bytes let go", interval=0.05)
        with pytest.raises(grpc.RpcError) as ended:
            for _ in chunks:
                pass
        assert ended.value.code() == grpc.StatusCode.CANCELLED, ended.value
    finally:
        chunks.cancel()


def test_an_upload_or_fetch_whose_client_goes_silent_ends_and_the_session_goes_on():
    # A client that neither sends the rest of its upload nor reads its fetch, its session
    # alive, held a proxy thread and the bytes staged until the session ended. Past
    # --client_stall_timeout each call ends (CANCELLED), the bytes go, the session lives.
    with switchyard.LocalCluster(workers=1, devices_per_worker=1, metrics=True,
                                 flags=("--client_stall_timeout=2s",)) as c:
        url = c.metrics["proxy"]
        stalls = "switchyard_proxy_client_stalls_total"
        staged = "switchyard_proxy_host_buffer_bytes"
        ch = channel(c.target)
        session = RawSession(ch)
        session_id = session.request(init_request=s.InitRequest()).init_response.session_id

        upload = OpenUpload(ch, session_id, 50, 12 << 20, timeout=60)
        upload.send(b"\1" * (5 << 20))  # then nothing more
        wait_until(lambda: upload.code is not None, timeout=30, what="the silent upload ended",
                   interval=0.05)
        assert upload.code == grpc.StatusCode.CANCELLED
        wait_until(lambda: metric_at(url, stalls) == 1, timeout=10, what="the stall counted",
                   interval=0.05)
        wait_until(lambda: metric_at(url, staged) == 0, timeout=10,
                   what="the upload's bytes let go", interval=0.05)

        chunks = half_read_fetch(ch, session, session_id, handle=51, timeout=60)
        try:
            wait_until(lambda: metric_at(url, stalls) == 2, timeout=30,
                       what="the unread fetch ended", interval=0.05)
            with pytest.raises(grpc.RpcError) as ended:
                for _ in chunks:
                    pass
            assert ended.value.code() == grpc.StatusCode.CANCELLED, ended.value
        finally:
            chunks.cancel()
        assert metric_at(url, "switchyard_proxy_sessions") == 1
        assert status(session.request(get_default_device_assignment_request=(
            s.GetDefaultDeviceAssignmentRequest(num_replicas=1, num_partitions=1)))) == OK
        session.close()


QUEUE_AND_DIE = """
import numpy as np, jax, switchyard
switchyard.initialize()
heavy = jax.jit(lambda m: jax.numpy.tanh(m @ m) * 0.5)
m = jax.device_put(np.ones((512, 512), np.float32) / 512, jax.devices()[0])
jax.block_until_ready(heavy(m))
for _ in range(300):
    m = heavy(m)  # queued: the client does not wait
print("QUEUED", flush=True)
import time; time.sleep(600)
"""


def test_a_client_that_goes_away_cancels_its_queued_launches(cluster):
    before = worker_stat(cluster, "executions")
    env = {**os.environ, **cluster.env()}
    client = subprocess.Popen([sys.executable, "-c", QUEUE_AND_DIE], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert read_line(client).strip() == "QUEUED"
        client.send_signal(signal.SIGKILL)
        client.wait()
        # The launches still in the operation stream are dropped; what the plugin had
        # queued (a window of them) runs. Then everything is freed.
        wait_until(lambda: worker_buffers(cluster) == 0,
                   what="no buffers left after the client died")
        ran = worker_stat(cluster, "executions") - before
        print(f"{ran} of 301 launches ran")
        assert ran < 150, f"{ran} of 301 launches ran after the client died"
    finally:
        client.kill()


def test_error_arrays_report_their_error_where_they_are_used(cluster):
    from ifrt import status_pb2
    session = RawSession(channel(cluster.target))
    session.request(init_request=s.InitRequest())
    sharding = t.ShardingProto(serialized_sharding=t.Serialized(
        type_name="xla::ifrt::SingleDeviceSharding",
        data=t.SingleDeviceShardingProto(device_id=1).SerializeToString()))
    spec = t.ArraySpecProto(dtype=t.DTypeProto(kind=t.DTypeProto.KIND_F32),
                            shape=t.ShapeProto(dims=[3]), sharding=sharding)
    made = session.request(make_error_arrays_request=s.MakeErrorArraysRequest(
        error=status_pb2.StatusProto(code=9, message="the input pipeline failed"),
        array_specs=[spec, spec], array_handles=[501, 502]))
    assert status(made) == OK, made
    assert list(made.make_error_arrays_response.array_handles) == [501, 502]
    fetched = session.request(copy_to_host_buffer_request=s.CopyToHostBufferRequest(
        host_buffer_handle=503, array_handle=501))
    assert status(fetched) == 9 and "the input pipeline failed" in \
        fetched.response_metadata.status.message, fetched
    # No error is no error array; the session goes on.
    refused = session.request(make_error_arrays_request=s.MakeErrorArraysRequest(
        array_specs=[spec], array_handles=[504]))
    assert status(refused) == grpc.StatusCode.INVALID_ARGUMENT.value[0], refused
    assert status(session.request(get_default_device_assignment_request=(
        s.GetDefaultDeviceAssignmentRequest(num_replicas=1, num_partitions=1)))) == OK
    session.close()


@pytest.mark.parametrize("strides", [[], [4]])
def test_token_arrays_from_host_data_are_refused(cluster, strides):
    # Token arrays (ordered effects) have no host form: an upload of one with byte
    # strides once divided by their zero element size.
    ch = channel(cluster.target)
    session = RawSession(ch)
    session_id = session.request(init_request=s.InitRequest()).init_response.session_id
    host_buffer_store(ch)(iter([g.GrpcHostBufferStoreRequest(data=b"\0" * 4)]),
                          metadata=store_metadata(session_id, 61, 4))
    sharding = single_device(0)
    request = s.MakeArrayFromHostBufferRequest(
        dtype=t.DTypeProto(kind=t.DTypeProto.KIND_TOKEN), shape=t.ShapeProto(dims=[4]),
        sharding=sharding, host_buffer_handle=61, array_handle=62)
    if strides:
        request.byte_strides.strides.extend(strides)
    made = session.request(make_array_from_host_buffer_request=request)
    assert status(made) == grpc.StatusCode.INVALID_ARGUMENT.value[0], made
    assert status(session.request(get_default_device_assignment_request=(
        s.GetDefaultDeviceAssignmentRequest(num_replicas=1, num_partitions=1)))) == OK
    session.close()


def test_bad_colocated_python_programs_get_clear_errors(cluster):
    """CustomCallPrograms as only a broken or hostile client sends them: refused with the
    reason, the session and the proxy stay up."""
    session = RawSession(channel(cluster.target))
    init = session.request(init_request=s.InitRequest())
    assert status(init) == OK
    device = init.init_response.all_devices[0].id

    def compile_program(data: bytes):
        return session.request(compile_request=s.CompileRequest(
            program=t.Serialized(type_name="xla::ifrt::CustomCallProgram", data=data),
            compile_options=t.Serialized(type_name="xla::ifrt::CustomCallCompileOptions")))

    def program(**fields):
        base = dict(type="jax_colocated_python_v0.0.1", name="f",
                    serialized_program_text=b"not a pickle",
                    devices=t.DeviceListProto(device_ids=[device]))
        base.update(fields)
        return t.CustomCallProgramProto(**base).SerializeToString()

    cases = [
        (b"\xff\xff\xff", grpc.StatusCode.INVALID_ARGUMENT, "malformed CustomCallProgram"),
        (program(type="someone_elses_v1"), grpc.StatusCode.UNIMPLEMENTED, "someone_elses_v1"),
        (program(devices=t.DeviceListProto(device_ids=[])), grpc.StatusCode.INVALID_ARGUMENT,
         "needs devices"),
        (program(devices=t.DeviceListProto(device_ids=[123456])), None, "123456"),
    ]
    for data, code, text in cases:
        response = compile_program(data)
        if code is not None:
            assert status(response) == code.value[0], response
        assert status(response) != OK, response
        assert text in response.response_metadata.status.message, response
    # A well-formed program whose pickle is junk compiles (the proxy never unpickles);
    # running it fails in the sidecar with the reason, bound to the output.
    compiled = compile_program(program())
    assert status(compiled) == OK, compiled
    session.close()
    fresh = RawSession(channel(cluster.target))
    assert status(fresh.request(init_request=s.InitRequest())) == OK
    fresh.close()
