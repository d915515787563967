"""Programs spanning the hosts of a multi-host PJRT client: on GPUs, the workers of one
slice form one client (one NCCL clique) and a program runs on all of them at once.

The CPU plugin cannot form such a client (it has no collectives across processes), and
this machine has no GPU, so the two workers here are FAKES: small gRPC servers speaking
worker.proto that register with the real resource manager as the two hosts of a
`num_nodes=2` client and record what the real proxy asks of them. What is tested is the
proxy's side: one compile per host with the global device assignment and the peers'
plugin ids, one launch per host with the same launch id, outputs whose shards live on
both hosts. The plugin's side (NCCL through the RM's key-value store) runs on a GPU
machine: docs/multi-host.md.
"""

import struct
import threading
import time
from concurrent import futures

import grpc
import pytest

from conftest import proxy_address, wait_until
from ifrt_raw import (
    RawSession,
    channel,
    compile_options_pb2,
    g,
    host_buffer_lookup,
    s,
    t,
    xla_data_pb2,
)
from switchyard import common_pb2 as c, rm_pb2, rm_pb2_grpc, worker_pb2, worker_pb2_grpc

DEVICES_PER_HOST = 2


class FakeHost(worker_pb2_grpc.WorkerServicer):
    """Node `node` of a 2-host client; each output shard it makes holds its device id."""

    def __init__(self, rm_address: str, node: int, fail_compile: bool = False,
                 protocol: int = 1):
        self.node = node
        self.fail_compile = fail_compile
        self.compiles: list = []
        self.executes: list = []
        self.deleted_executables: list = []
        self.streams: list = []  # the Dispatch stream of each of `executes`
        self.open_streams = 0
        self.buffers: dict[int, int] = {}  # id -> device
        self.lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        worker_pb2_grpc.add_WorkerServicer_to_server(self, self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.address = f"127.0.0.1:{port}"
        rm = rm_pb2_grpc.ResourceManagerStub(grpc.insecure_channel(rm_address))
        registered = rm.RegisterWorker(rm_pb2.RegisterWorkerRequest(
            protocol_version=protocol, address=self.address, slice_index=0, host_index=node,
            plugin=c.PluginInfo(platform_name="cuda", platform_version="fake", num_nodes=2,
                                node_id=node),
            devices=[c.DeviceInfo(local_ordinal=k, kind="fake GPU",
                                  plugin_id=DEVICES_PER_HOST * node + k,
                                  default_memory_kind="device",
                                  memories=[c.MemoryInfo(local_id=k, kind="device")])
                     for k in range(DEVICES_PER_HOST)],
            hostname="fake", pid=0), timeout=10)
        self.global_ids = [d.global_id for d in registered.devices]
        self.stopped = threading.Event()

        def heartbeat():
            while not self.stopped.wait(0.3):
                try:
                    rm.Heartbeat(rm_pb2.HeartbeatRequest(incarnation=registered.incarnation),
                                 timeout=2)
                except grpc.RpcError:
                    pass
        threading.Thread(target=heartbeat, daemon=True).start()

    def stop(self):
        self.stopped.set()
        self.server.stop(0)

    def Compile(self, request, context):
        with self.lock:
            self.compiles.append(request)
        if self.fail_compile:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "fake compile failure")
        sharding = xla_data_pb2.OpSharding(type=xla_data_pb2.OpSharding.OTHER,
                                           tile_assignment_dimensions=[4],
                                           tile_assignment_devices=[0, 1, 2, 3])
        return worker_pb2.CompileResponse(
            device_ids=[d for d in request.device_ids if d in self.global_ids],
            outputs=[worker_pb2.OutputSpec(dtype=c.F32, dims=[2])], name="spmd",
            num_replicas=1, num_partitions=4, output_sharding=sharding.SerializeToString())

    def Dispatch(self, request_iterator, context):
        stream = dict(context.invocation_metadata()).get("switchyard-stream")
        with self.lock:
            self.open_streams += 1
        context.add_callback(self.stream_ended)
        for op in request_iterator:
            kind = op.WhichOneof("op")
            with self.lock:
                if kind == "execute":
                    self.executes.append(op.execute)
                    self.streams.append(stream)
                    for device, ids in zip(self.global_ids, op.execute.outputs):
                        for buffer_id in ids.ids:
                            self.buffers[buffer_id] = device
                elif kind == "delete_executables":
                    self.deleted_executables += list(op.delete_executables.executable_ids)
            if kind == "await_buffers" or op.reply:
                yield worker_pb2.DispatchResponse(seq=op.seq, code=0)

    def stream_ended(self):
        with self.lock:
            self.open_streams -= 1

    def GetBuffer(self, request, context):
        # As a real worker does (after_seq, wait_ms), wait for the launch that makes the
        # buffer: it comes on the Dispatch stream, which this fake reads on another thread.
        wait_ms = 10_000 if request.after_seq else max(request.wait_ms, 0)
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            with self.lock:
                device = self.buffers.get(request.buffer_id)
            if device is not None or time.monotonic() >= deadline:
                break
            time.sleep(0.01)
        if device is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no buffer {request.buffer_id}")
        data = struct.pack("<2f", device, device)
        yield worker_pb2.GetBufferChunk(header=worker_pb2.BufferHeader(
            buffer_id=request.buffer_id, device_id=device, dtype=c.F32, dims=[2],
            size_bytes=len(data)), data=data)

    def DeleteBuffers(self, request, context):
        return worker_pb2.DeleteBuffersResponse()


def wait_for_view(target: str, hosts) -> None:
    """Waits until the proxy at `target` shows a session every device of `hosts`: it learns
    of a host from the RM's fleet watch, a moment after the host registered, and a
    session that comes sooner sees (and compiles over) the hosts it knew of then."""
    wanted = {d for host in hosts for d in host.global_ids}
    ch = channel(target)

    def seen() -> bool:
        session = RawSession(ch)
        try:
            init = session.request(init_request=s.InitRequest()).init_response
            return wanted <= {d.id for d in init.all_devices}
        finally:
            session.close()

    wait_until(seen, timeout=20, what="the proxy to see every host", interval=0.05)


@pytest.fixture
def proxy(spawn, rm):
    process = spawn("proxy", "--server_port=0", f"--resource_manager_address={rm.address}")
    process.target = proxy_address(process)
    return process


def program_over(devices):
    """A compile request whose device assignment is 1 replica x len(devices) partitions."""
    assignment = compile_options_pb2.DeviceAssignmentProto(
        replica_count=1, computation_count=len(devices),
        computation_devices=[compile_options_pb2.DeviceAssignmentProto.ComputationDevice(
            replica_device_ids=[d]) for d in devices])
    options = compile_options_pb2.CompileOptionsProto(
        executable_build_options=compile_options_pb2.ExecutableBuildOptionsProto(
            num_replicas=1, num_partitions=len(devices), device_assignment=assignment))
    return s.CompileRequest(
        program=t.Serialized(type_name="xla::ifrt::XlaProgram", data=b"(program bytes)"),
        compile_options=t.Serialized(
            type_name="xla::ifrt::XlaCompileOptions",
            data=t.XlaCompileOptionsProto(
                compile_options=options.SerializeToString()).SerializeToString()))


def fetch(ch, session, session_id, array_handle, handle):
    response = session.request(copy_to_host_buffer_request=s.CopyToHostBufferRequest(
        host_buffer_handle=handle, array_handle=array_handle))
    assert response.response_metadata.status.code == 0, response
    lookup = host_buffer_lookup(ch)
    data = b"".join(r.data for r in lookup(g.GrpcHostBufferLookupRequest(
        session_id=session_id, handle=handle), timeout=30))
    return list(struct.unpack(f"<{len(data) // 4}f", data))


def test_program_spanning_two_hosts_compiles_and_launches_on_both(rm, proxy):
    hosts = [FakeHost(rm.address, 0), FakeHost(rm.address, 1)]
    try:
        wait_for_view(proxy.target, hosts)
        ch = channel(proxy.target)
        session = RawSession(ch)
        init = session.request(init_request=s.InitRequest()).init_response
        devices = sorted(d.id for d in init.all_devices)
        assert devices == hosts[0].global_ids + hosts[1].global_ids

        compiled = session.request(compile_request=program_over(devices))
        assert compiled.response_metadata.status.code == 0, compiled
        assert list(compiled.compile_response.addressable_device_ids) == devices
        plugin_ids = {gid: i for i, gid in enumerate(devices)}
        for host in hosts:
            [request] = host.compiles
            assert list(request.device_ids) == devices
            assert dict(request.peer_plugin_ids) == plugin_ids
        assert hosts[0].compiles[0].executable_id != hosts[1].compiles[0].executable_id

        handle = compiled.compile_response.loaded_executable_handle
        outputs = []
        for _ in range(3):
            response = session.request(loaded_executable_execute_request=(
                s.LoadedExecutableExecuteRequest(loaded_executable_handle=handle)))
            assert response.response_metadata.status.code == 0, response
            outputs.append(response.loaded_executable_execute_response.outputs[0])
        # The launches went out without waiting; a fetch orders after them.
        values = fetch(ch, session, init.session_id, outputs[-1].array_handle, 1000)
        assert values == [float(d) for d in devices for _ in range(2)]
        for host in hosts:
            assert len(host.executes) == 3
            for launch in host.executes:
                assert len(launch.outputs) == DEVICES_PER_HOST
                assert len(launch.arguments) == DEVICES_PER_HOST
        launch_ids = [[e.launch_id for e in host.executes] for host in hosts]
        # The proxy's own ids (no RM numbering for workers of this protocol): above the
        # RM's, which are below 2^30.
        assert launch_ids[0] == launch_ids[1]
        first_id = launch_ids[0][0]
        assert launch_ids[0] == [first_id, first_id + 1, first_id + 2]
        assert first_id >= 1 << 30
        # A worker of the first protocol reads one stream, in order: nothing numbered.
        assert all(e.gang == 0 for host in hosts for e in host.executes)
        assert list(outputs[0].shape.dims) == [8]

        session.request(loaded_executable_destruct_request=s.LoadedExecutableDestructRequest(
            loaded_executable_handle=handle))
        session.close()
        wait_until(lambda: all(host.deleted_executables for host in hosts), timeout=10,
                   what="executables deleted on both hosts", interval=0.05)
        for host in hosts:
            assert host.deleted_executables == [host.compiles[0].executable_id]
    finally:
        for host in hosts:
            host.stop()


def compile_over_both_hosts(session) -> int:
    """Compiles a program over every device the session sees; its executable handle."""
    init = session.request(init_request=s.InitRequest()).init_response
    devices = sorted(d.id for d in init.all_devices)
    compiled = session.request(compile_request=program_over(devices))
    assert compiled.response_metadata.status.code == 0, compiled
    return compiled.compile_response.loaded_executable_handle


def launch_together(sessions, handles, per_session: int, hosts) -> None:
    """Each session launches its program `per_session` times, all sessions at once;
    returns once every host has been handed every launch."""
    errors = []

    def launch(session, handle):
        for _ in range(per_session):
            response = session.request(loaded_executable_execute_request=(
                s.LoadedExecutableExecuteRequest(loaded_executable_handle=handle)))
            if response.response_metadata.status.code != 0:
                errors.append(response)

    threads = [threading.Thread(target=launch, args=pair) for pair in zip(sessions, handles)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors[0]
    expected = len(sessions) * per_session
    deadline = time.monotonic() + 10
    while not all(len(host.executes) == expected for host in hosts):
        assert time.monotonic() < deadline, [len(host.executes) for host in hosts]
        time.sleep(0.05)


def test_sessions_launch_on_lanes_of_their_own_and_every_host_orders_them_alike(rm, proxy):
    """Two sessions launch programs spanning both hosts at once. Each session has its
    own Dispatch stream (lane) on each host, so the hosts cannot rely on one stream's
    order: the proxy numbers the multi-host launches (ExecuteRequest.gang) as it sends
    them, and both hosts must see the same launch under each number."""
    hosts = [FakeHost(rm.address, node, protocol=3) for node in (0, 1)]
    per_session = 12
    try:
        wait_for_view(proxy.target, hosts)
        ch = channel(proxy.target)
        sessions = [RawSession(ch) for _ in range(2)]
        handles = [compile_over_both_hosts(session) for session in sessions]
        launch_together(sessions, handles, per_session, hosts)
        for host in hosts:
            gangs = sorted(e.gang for e in host.executes)
            assert gangs == list(range(1, 2 * per_session + 1)), gangs
            by_session: dict[int, set[int]] = {}
            for launch_, stream in zip(host.executes, host.streams):
                by_session.setdefault(launch_.session, set()).add(stream)
            assert len(by_session) == 2
            lanes = list(by_session.values())
            assert all(len(lane) == 1 for lane in lanes), lanes  # one stream per session
            assert lanes[0] != lanes[1]
        orders = [[e.launch_id for e in sorted(host.executes, key=lambda e: e.gang)]
                  for host in hosts]
        assert orders[0] == orders[1]
        # A session's end closes its lanes (after its executables' deletions went out);
        # the connection's own stream (opened for the compiles: it holds the proxy's
        # lease on the worker for what unary calls make) stays.
        assert all(host.open_streams == 3 for host in hosts), [h.open_streams for h in hosts]
        for session in sessions:
            session.close()
        deadline = time.monotonic() + 10
        while any(host.open_streams != 1 for host in hosts):
            assert time.monotonic() < deadline, [h.open_streams for h in hosts]
            time.sleep(0.05)
        assert all(len(host.deleted_executables) == 2 for host in hosts)
    finally:
        for host in hosts:
            host.stop()


def test_failed_compile_on_one_host_fails_the_program_and_frees_the_other(rm, proxy):
    hosts = [FakeHost(rm.address, 0), FakeHost(rm.address, 1, fail_compile=True)]
    try:
        wait_for_view(proxy.target, hosts)
        session = RawSession(channel(proxy.target))
        init = session.request(init_request=s.InitRequest()).init_response
        devices = sorted(d.id for d in init.all_devices)
        compiled = session.request(compile_request=program_over(devices))
        status = compiled.response_metadata.status
        assert status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert "fake compile failure" in status.message
        wait_until(lambda: hosts[0].deleted_executables == [hosts[0].compiles[0].executable_id],
                   timeout=10, what="the compiled copy deleted", interval=0.05)
        # The session goes on: a program on one host compiles there only.
        one_host = session.request(compile_request=program_over(devices[:2]))
        assert one_host.response_metadata.status.code == 0, one_host
        assert len(hosts[0].compiles) == 2 and len(hosts[1].compiles) == 1
        session.close()
    finally:
        for host in hosts:
            host.stop()


def test_cpu_worker_cannot_be_a_multi_host_node(start_worker):
    worker = start_worker(0, 1, 0, 2, "--num_nodes=2", wait=False)
    worker.wait_for("cannot start")
    assert worker.proc.wait(timeout=30) == 1
    assert "could not form a 2-host client" in worker.output
    # The plugin's own words: it has no such option (it names whichever of the two it
    # meets first, in an order that changes from run to run).
    assert "num_nodes" in worker.output.split("could not form")[1] or \
        "node_id" in worker.output.split("could not form")[1], worker.output


def test_two_proxies_launches_on_shared_hosts_start_in_the_rms_one_order(rm, spawn):
    """Two proxies (a session each) launch programs spanning both hosts at once. Each
    proxy alone can only order its own launches; the resource manager numbers every
    proxy's multi-host launches (ExecuteRequest.gang in its numbering gang_sequencer),
    so both hosts must see the same launch under each number, from whichever proxy."""
    hosts = [FakeHost(rm.address, node, protocol=4) for node in (0, 1)]
    proxies = []
    for _ in range(2):
        process = spawn("proxy", "--server_port=0", f"--resource_manager_address={rm.address}")
        proxies.append(proxy_address(process))
    per_session = 10
    try:
        for target in proxies:
            wait_for_view(target, hosts)
        sessions = [RawSession(channel(target)) for target in proxies]
        handles = [compile_over_both_hosts(session) for session in sessions]
        launch_together(sessions, handles, per_session, hosts)
        sequencers = {e.gang_sequencer for host in hosts for e in host.executes}
        assert len(sequencers) == 1 and 0 not in sequencers, sequencers
        for host in hosts:
            gangs = sorted(e.gang for e in host.executes)
            assert gangs == list(range(1, 2 * per_session + 1)), gangs
        # The RM's launch ids: no two launches of the two proxies share one.
        orders = [[e.launch_id for e in sorted(host.executes, key=lambda e: e.gang)]
                  for host in hosts]
        assert orders[0] == orders[1]
        assert len(set(orders[0])) == 2 * per_session
        # Both proxies' launches are interleaved in that one order, each session's in
        # its own order.
        by_session = [[e.session for e in sorted(host.executes, key=lambda e: e.gang)]
                      for host in hosts]
        assert by_session[0] == by_session[1]
        for session in sessions:
            session.close()
    finally:
        for host in hosts:
            host.stop()


class ProxyStandIn:
    """Speaks to the RM as a proxy does for gang numbers: a fleet watch open under its
    id (while none is, the RM voids its numbers), and the numbering calls."""

    def __init__(self, rm_address: str, proxy_id: int):
        self.id = proxy_id
        self.rm = rm_pb2_grpc.ResourceManagerStub(grpc.insecure_channel(rm_address))
        self.watch = self.rm.WatchFleet(rm_pb2.WatchFleetRequest(proxy=proxy_id))
        next(self.watch)  # open on the RM: the first fleet came

    def number(self, session: int, hosts) -> rm_pb2.NumberGangResponse:
        return self.rm.NumberGang(rm_pb2.NumberGangRequest(
            proxy=self.id, session=session,
            hosts=[rm_pb2.HostRef(slice_index=sl, host_index=h) for sl, h in hosts]), timeout=10)

    def voids(self, host, sequencer: int, first: int, last: int) -> rm_pb2.GangVoidsResponse:
        return self.rm.GangVoids(rm_pb2.GangVoidsRequest(
            slice_index=host[0], host_index=host[1], sequencer=sequencer, first=first,
            last=last), timeout=10)


def test_the_rm_voids_gang_numbers_whose_session_or_proxy_ended_and_refuses_bad_asks(rm):
    hosts = [FakeHost(rm.address, node, protocol=4) for node in (0, 1)]
    both = [(0, 0), (0, 1)]
    try:
        rm_stub = rm_pb2_grpc.ResourceManagerStub(grpc.insecure_channel(rm.address))
        # Without a watch the RM could never tell that the numbers are void: refused.
        with pytest.raises(grpc.RpcError) as refused:
            rm_stub.NumberGang(rm_pb2.NumberGangRequest(
                proxy=5, session=1, hosts=[rm_pb2.HostRef(slice_index=0, host_index=0)]),
                timeout=10)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        proxy = ProxyStandIn(rm.address, 5)
        bad_hosts = [([], "1 to"), ([(0, 0), (0, 0)], "twice"), ([(3, 0)], "not in the fleet")]
        for bad, what in bad_hosts:
            with pytest.raises(grpc.RpcError) as invalid:
                proxy.number(1, bad)
            assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert what in invalid.value.details()
        first = proxy.number(1, both)
        second = proxy.number(2, both)
        sequencer = first.sequencer
        assert list(first.numbers) == [1, 1] and list(second.numbers) == [2, 2]
        assert first.launch_id != second.launch_id
        assert list(proxy.voids((0, 0), sequencer, 1, 2).voids) == []
        # Session 1 ends: its number is void on both hosts; session 2's is not.
        proxy.rm.VoidGangs(rm_pb2.VoidGangsRequest(proxy=5, session=1, session_ended=True),
                           timeout=10)
        assert list(proxy.voids((0, 1), sequencer, 1, 2).voids) == [1]
        # A launch numbered and not sent: its proxy voids those numbers alone.
        third = proxy.number(2, both)
        proxy.rm.VoidGangs(rm_pb2.VoidGangsRequest(
            proxy=5, session=2, hosts=[rm_pb2.HostRef(slice_index=0, host_index=0)],
            numbers=[third.numbers[0]]), timeout=10)
        assert list(proxy.voids((0, 0), sequencer, 1, 3).voids) == [1, 3]
        assert list(proxy.voids((0, 1), sequencer, 1, 3).voids) == [1]
        # The proxy's watch ends (it died): every number it had is void.
        proxy.watch.cancel()
        deadline = time.monotonic() + 10
        while list(proxy.voids((0, 1), sequencer, 1, 3).voids) != [1, 2, 3]:
            assert time.monotonic() < deadline, proxy.voids((0, 1), sequencer, 1, 3)
            time.sleep(0.1)
        # A numbering the RM does not give (an RM from before a restart): all void.
        assert proxy.voids((0, 0), sequencer + 1, 1, 3).unknown_sequencer
        with pytest.raises(grpc.RpcError) as too_many:
            proxy.voids((0, 0), sequencer, 1, 1 << 20)
        assert too_many.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        for host in hosts:
            host.stop()


def test_a_real_worker_starts_rm_numbered_launches_in_order_passing_void_numbers(start_worker, rm):
    """A real (CPU) worker and the RM: a launch under the RM's number 2 waits for 1;
    once 1 is void (its proxy said its launch was not sent) the worker learns it from the
    RM and starts 2; 1's launch arriving after all is refused, not started out of order.
    A single-device program stands in for a part of a multi-host one: the order is the
    worker's, whatever the program (the CPU plugin has no multi-host programs)."""
    import numpy as np

    import switchyard
    from switchyard.programs import lower_portable

    process = start_worker(0, 0, 0, 1)
    proxy = ProxyStandIn(rm.address, 9)
    with switchyard.WorkerClient(process.address) as worker:
        [device] = worker.device_ids()
        program = lower_portable(lambda x: x + 1, np.zeros(4, np.float32))
        executable, _ = worker.compile(program, [device])
        argument = worker.put(np.arange(4, dtype=np.float32), device)
        one, two = proxy.number(1, [(0, 0)]), proxy.number(1, [(0, 0)])
        assert one.sequencer == two.sequencer

        def launch(numbered, results):
            output = worker.new_id()
            try:
                worker._stub.Execute(worker_pb2.ExecuteRequest(
                    executable_id=executable, arguments=[worker_pb2.BufferIdList(ids=[argument])],
                    outputs=[worker_pb2.BufferIdList(ids=[output])], wait=True,
                    gang=numbered.numbers[0], gang_sequencer=numbered.sequencer), timeout=60)
                results.append(worker.get(output))
            except grpc.RpcError as e:
                results.append(e)

        second: list = []
        waiting = threading.Thread(target=launch, args=(two, second))
        waiting.start()
        waiting.join(1.5)  # the worker asked the RM once: 1 is on its way, not void
        assert waiting.is_alive() and not second
        proxy.rm.VoidGangs(rm_pb2.VoidGangsRequest(
            proxy=9, session=1, hosts=[rm_pb2.HostRef(slice_index=0, host_index=0)],
            numbers=[one.numbers[0]]), timeout=10)
        waiting.join(10)
        assert not waiting.is_alive()
        assert list(second[0]) == [1, 2, 3, 4], second
        first: list = []
        launch(one, first)
        [refused] = first
        assert isinstance(refused, grpc.RpcError), refused
        assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "after its turn" in refused.details()
        # The worker's heartbeats tell the RM what it passed: the RM forgets them.
        deadline = time.monotonic() + 10
        while list(proxy.voids((0, 0), one.sequencer, 1, 2).voids) != [1, 2]:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    # The worker is still up and serving.
    assert process.proc.poll() is None


def test_with_the_rm_gone_a_proxy_orders_its_own_multi_host_launches(rm, proxy):
    """The RM numbers multi-host launches; killed, it cannot: the proxy's launches go on,
    numbered by the proxy itself (ordered within it, as before there was an RM order)."""
    hosts = [FakeHost(rm.address, node, protocol=4) for node in (0, 1)]
    try:
        wait_for_view(proxy.target, hosts)
        session = RawSession(channel(proxy.target))
        init = session.request(init_request=s.InitRequest()).init_response
        devices = sorted(d.id for d in init.all_devices)
        compiled = session.request(compile_request=program_over(devices))
        handle = compiled.compile_response.loaded_executable_handle

        def launch():
            response = session.request(loaded_executable_execute_request=(
                s.LoadedExecutableExecuteRequest(loaded_executable_handle=handle)))
            assert response.response_metadata.status.code == 0, response

        launch()
        rm.proc.kill()
        rm.proc.wait(timeout=10)
        started = time.monotonic()
        for _ in range(3):
            launch()
        # One bounded try of the RM, then the proxy's own numbers without asking again.
        assert time.monotonic() - started < 5
        deadline = time.monotonic() + 10
        while not all(len(host.executes) == 4 for host in hosts):
            assert time.monotonic() < deadline, [len(host.executes) for host in hosts]
            time.sleep(0.05)
        for host in hosts:
            first, *rest = host.executes
            assert first.gang_sequencer != 0 and first.gang == 1
            assert [(e.gang_sequencer, e.gang) for e in rest] == [(0, 1), (0, 2), (0, 3)]
        assert proxy.proc.poll() is None
        session.close()
    finally:
        for host in hosts:
            host.stop()
