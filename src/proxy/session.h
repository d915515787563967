#pragma once

// One client's session: the IFRT proxy requests of one `IfrtSession` stream, in
// order, against the fleet. Holds the client's arrays, executables and futures;
// destroying the session frees everything it put on workers.
// Called from the session's stream thread only; readiness checks and fetches are
// answered later, from other threads, through the sink.
//
// Failure: whatever touches a lost worker fails with DATA_LOSS naming its slice and
// host, at once when the loss is known and when it happens otherwise; nothing on the
// other slices is disturbed. Programs are compiled again, transparently, on a worker
// that came back.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/limits.h"
#include "common/task_threads.h"
#include "ifrt/ifrt_service.pb.h"
#include "proxy/array_table.h"
#include "proxy/call_set.h"
#include "proxy/fleet.h"
#include "proxy/host_buffer_store.h"
#include "proxy/late_futures.h"
#include "proxy/launch_budget.h"
#include "proxy/metadata_cache.h"
#include "proxy/plugin_program.h"
#include "proxy/response_sink.h"
#include "proxy/transfer_batch.h"
#include "proxy/version.h"
#include "proxy/worker_calls.h"
#include "switchyard/worker.pb.h"
#include "xla/xla_data.pb.h"

namespace switchyard::proxy {

namespace wire = ::xla::ifrt::proxy;

// One worker's share of a program: its compiled copy and its devices.
struct ExecutablePart {
  WorkerConnection* worker = nullptr;
  uint64_t worker_id = 0;
  uint64_t epoch = 0;            // the worker's epoch it was compiled in
  std::vector<int64_t> devices;  // global ids, in the worker's launch order
};

// The CustomCallProgram type of jax.experimental.colocated_python.
inline constexpr char kColocatedPythonType[] = "jax_colocated_python_v0.0.1";
inline constexpr char kCustomCallProgram[] = "xla::ifrt::CustomCallProgram";

struct ColocatedSpec {
  DType dtype = DTYPE_INVALID;
  std::vector<int64_t> shape;
  Sharding sharding;
};

struct ColocatedProgram {
  std::string name;
  std::string pickled;  // the client's cloudpickled function and specs
  std::vector<ColocatedSpec> inputs, outputs;
};

// A program compiled on one worker, or on every worker of a multi-host client.
struct Executable {
  std::vector<ExecutablePart> parts;
  CompileRequest request;  // as sent (but for the id), to compile it again
  std::string name;
  std::vector<int64_t> devices;  // all of them, in launch (logical device) order
  std::vector<DType> output_dtypes;
  std::vector<std::vector<int64_t>> output_shard_dims;  // per device
  // Device layouts' dimension orders, minor first; empty: the default.
  std::vector<std::vector<int64_t>> output_layouts;
  std::vector<std::vector<int64_t>> parameter_layouts;
  std::vector<switchyard::xla::OpSharding> output_shardings;
  std::vector<switchyard::xla::OpSharding> parameter_shardings;
  std::vector<int> donated_parameters;
  bool shardings_known = false;
  // As the (first) worker's plugin reported them; empty if it did not.
  std::map<std::string, double> cost_analysis;
  std::string compiled_memory_stats;  // serialized xla.CompiledMemoryStatsProto
  // Asked of the worker when the client first wants them (Worker.DescribeProgram); kept
  // once settled (an answer, or a refusal that asking again would not change).
  std::optional<absl::StatusOr<DescribeProgramResponse>> described;
  // A plugin program (persistence, profiling, reshard): served by the proxy and the
  // workers' own storage paths, never compiled; `parts` is empty.
  std::shared_ptr<const PluginRequest> plugin;
  // A colocated Python function: run by the workers' sidecars; `parts` is empty.
  std::shared_ptr<const ColocatedProgram> colocated;
  // The lane its launches and its deletion go on (WorkerConnection): its session's.
  uint64_t lane = 0;

  ~Executable();
};

// Who a session is and what it may hold.
struct SessionPolicy {
  // Names the session in logs ("7 (alice)"). Never the session id: that id is all the
  // host-buffer RPCs carry.
  std::string label;
  // The authenticated tenant whose device time the session's launches are (empty: no
  // tenants are configured; the session is its own).
  std::string tenant;
  // More than this many of the session's slices down at once fails the session (-1:
  // never).
  int num_elastic_slices = -1;
  // Live array handles (arrays, and failed requests' error handles) the session may
  // hold: a request that would make more is refused with RESOURCE_EXHAUSTED, an error
  // its handles carry for up to kRefusedHandlesMax handles past the bound. 0: no bound.
  int64_t max_arrays = 0;
  // Where gs:// and s3:// buckets are mounted (profiles are written there).
  std::string storage_mount_root;
  // The proxy's data plane, where workers pull large uploads from (PutPlane); null:
  // uploads go over gRPC.
  bulk::Server* upload_plane = nullptr;
  // The slices the session leased from the pool: it sees only their devices. Nullopt:
  // every slice of the fleet.
  std::optional<std::set<int>> slices;
};

class Session {
 public:
  // `cancelled` says whether the client has gone; long waits check it. Answers that
  // come later go to `sink`.
  Session(uint64_t id, Version version, Fleet* fleet, std::shared_ptr<HostBufferStore> host_buffers,
          std::function<bool()> cancelled, std::shared_ptr<ResponseSink> sink,
          SessionPolicy policy = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Answers one request, now or (nullopt) later through the sink. Never fails:
  // errors travel in the response's status.
  std::optional<wire::IfrtResponse> Process(const wire::IfrtRequest& request);

  uint64_t id() const { return id_; }
  size_t arrays() const { return arrays_.size(); }
  // OK while the session can go on; DATA_LOSS, naming them, once more of its slices are
  // down than --num_elastic_slices allows.
  absl::Status Health() const;

 private:
  // One kind of request answered at once: how, and which client-chosen handles it makes
  // (a failed request binds its error to them). One table lists them all (session.cc).
  struct RequestKind {
    absl::Status (*answer)(Session& session, const wire::IfrtRequest& request,
                           wire::IfrtResponse* response) = nullptr;
    std::vector<uint64_t> (*created)(const wire::IfrtRequest& request) = nullptr;
  };
  using RequestKinds = absl::flat_hash_map<int, RequestKind>;  // by IfrtRequest::request_case
  static void AddArrayRequestKinds(RequestKinds& kinds);
  static void AddExecutableRequestKinds(RequestKinds& kinds);
  static const RequestKind* FindRequestKind(const wire::IfrtRequest& request);
  // `kind` is FindRequestKind's answer for `request`, looked up once per request.
  static std::vector<uint64_t> CreatedHandles(const RequestKind* kind,
                                              const wire::IfrtRequest& request);
  absl::Status Dispatch(const RequestKind* kind, const wire::IfrtRequest& request,
                        wire::IfrtResponse* response);

  // Requests, one handler each (session.cc, session_arrays.cc, session_executables.cc;
  // the plugin programs and colocated Python below), reached through the table of
  // request kinds.
  absl::Status HandleInit(wire::InitResponse* response);
  absl::Status HandleCheckFuture(const wire::CheckFutureRequest& request);
  absl::Status HandleMakeArrayFromHostBuffer(const wire::MakeArrayFromHostBufferRequest& request,
                                             wire::MakeArrayFromHostBufferResponse* response);
  absl::Status HandleMakeErrorArrays(const wire::MakeErrorArraysRequest& request,
                                     wire::MakeErrorArraysResponse* response);
  absl::Status HandleMakeArraysFromHostBufferShards(
      const wire::MakeArraysFromHostBufferShardsRequest& request,
      wire::MakeArraysFromHostBufferShardsResponse* response);
  absl::Status HandleAssemble(const wire::AssembleArrayFromSingleDeviceArraysRequest& request,
                              wire::AssembleArrayFromSingleDeviceArraysResponse* response);
  absl::Status HandleDisassemble(const wire::DisassembleIntoSingleDeviceArraysRequest& request,
                                 wire::DisassembleIntoSingleDeviceArraysResponse* response);
  absl::Status HandleFullyReplicatedShard(const wire::FullyReplicatedShardRequest& request,
                                          wire::FullyReplicatedShardResponse* response);
  absl::Status HandleCopyArrays(const wire::CopyArraysRequest& request,
                                wire::CopyArraysResponse* response);
  absl::Status HandleRemapArrays(const wire::RemapArraysRequest& request,
                                 wire::RemapArraysResponse* response);
  absl::Status HandleReshardArrays(const wire::ReshardArraysRequest& request,
                                   wire::ReshardArraysResponse* response);
  // Answered through the sink once the shards are gathered; the session goes on with
  // the next request meanwhile, and the host buffer is visible to lookups at once. An
  // array one shard holds whole is streamed instead, and answered now (`answered`).
  absl::Status CopyToHostBufferLater(const wire::CopyToHostBufferRequest& request, uint64_t op_id,
                                     bool* answered);
  // A small shard's bytes into `host`, read over the lane that made it (no call of its
  // own, no fetch thread; the lane's writer sends it, so the client's answer goes first);
  // an error (and nothing done) when that lane is closed.
  absl::Status ReadOnLane(const RemoteBuffer& shard, std::shared_ptr<HostBuffer> host);
  // Answered through the sink once every worker holding the values says they are
  // computed; the session goes on with the next request meanwhile.
  // Answers later, or sets `now` to the answer when it is known at once.
  absl::Status CheckValueReadyLater(const wire::CheckValueReadyRequest& request, uint64_t op_id,
                                    std::optional<absl::Status>* now);
  absl::Status HandleDeleteArray(const wire::DeleteArrayRequest& request,
                                 wire::DeleteArrayResponse* response);
  absl::Status HandleDestructArray(const wire::DestructArrayRequest& request);
  absl::Status HandleIsArrayDeleted(const wire::IsArrayDeletedRequest& request,
                                    wire::IsArrayDeletedResponse* response);
  absl::Status HandleGetDefaultLayout(const wire::GetDefaultLayoutRequest& request,
                                      wire::GetDefaultLayoutResponse* response);
  // A compile in flight: what the request loop prepared, and the workers' answers.
  struct PendingCompile {
    CompileRequest compile;
    std::vector<int64_t> devices;
    std::vector<WorkerConnection*> workers;
    std::vector<CompileRequest> requests;  // one per worker
    std::vector<absl::StatusOr<Compiled>> compiled;
    bool done = false;  // compiled already (on a stand-in)
    uint64_t handle = 0;
    uint64_t ready_future = 0;
  };
  // Answered through the sink once the workers have compiled (or loaded from their
  // compilation cache) the program; the session goes on with the next request meanwhile.
  absl::Status CompileLater(const wire::CompileRequest& request, uint64_t op_id);
  // Runs off the session thread: compiles on the workers and makes the executable.
  absl::StatusOr<std::shared_ptr<Executable>> FinishCompile(PendingCompile& pending);
  absl::Status HandleProgramText(
      const wire::LoadedExecutableHumanReadableProgramTextRequest& request,
      wire::LoadedExecutableHumanReadableProgramTextResponse* response);
  // The worker's description of `executable`, asked until settled; valid while
  // `executable` lives.
  absl::StatusOr<const DescribeProgramResponse*> Described(Executable& executable);
  absl::Status HandleCostAnalysis(const wire::LoadedExecutableCostAnalysisRequest& request,
                                  wire::LoadedExecutableCostAnalysisResponse* response);
  absl::Status HandleExecutableMetadata(const wire::LoadedExecutableMetadataRequest& request,
                                        wire::LoadedExecutableMetadataResponse* response);
  absl::Status HandleExecute(const wire::LoadedExecutableExecuteRequest& request,
                             wire::LoadedExecutableExecuteResponse* response);
  // A compiled program's launch: one operation per part (per worker).
  struct LaunchPlan {
    std::vector<DispatchRequest> launches;
    std::vector<std::vector<size_t>> positions;  // per part: its devices' places in the program's
    std::vector<WorkerConnection::Ticket> tickets;      // per part, once sent
    std::vector<std::shared_ptr<Completion>> computed;  // per part: its worker's answer
    absl::Status lost;  // a DATA_LOSS the outputs carry (the launch met a lost slice)
  };
  // Each part's launch: the shard of every argument on each of its devices, and fresh
  // output ids. Everything is checked before the first output id is taken.
  absl::Status PlanLaunch(const Executable& executable,
                          const std::vector<std::shared_ptr<Array>>& args, LaunchPlan* plan);
  // Sends the parts (several as one step) within the session's budget of launches in
  // flight; one that cannot go makes the outputs lost.
  absl::Status SendLaunch(const Executable& executable, LaunchPlan* plan);
  // Numbers a multi-host launch's parts in the RM's gang order, where every host takes
  // it and the RM answers (else the worker connections number them in this proxy's):
  // the numbers, to void if the launch is not sent.
  std::optional<GangNumbers> NumberGang(const Executable& executable, LaunchPlan* plan);
  // The launch's output arrays, their shards in the program's device order.
  static std::vector<std::shared_ptr<Array>> LaunchOutputs(const Executable& executable,
                                                           const LaunchPlan& plan);
  // Plugin programs (session_plugin_programs.cc). The compile is answered at once.
  absl::Status CompilePlugin(const wire::CompileRequest& request, uint64_t op_id);
  absl::Status ExecutePlugin(const Executable& executable,
                             const wire::LoadedExecutableExecuteRequest& request,
                             wire::LoadedExecutableExecuteResponse* response);
  // Registers an executable the proxy serves itself (a plugin program, a colocated
  // function) and answers its compile at once.
  absl::Status AddServedExecutable(std::shared_ptr<Executable> executable, uint64_t op_id);
  // An output shard planned before its operation is sent: shard `slot` of output
  // `array`, buffer `id` that `worker` will make on `device`.
  struct PlannedShard {
    WorkerConnection* worker;
    uint64_t id;
    int64_t device;
    size_t array, slot;
  };
  // Sends each worker its one operation on this session's lane, each settling `join`,
  // then fills each planned shard of `outputs`: the buffer its worker will make, or one
  // lost with why its send failed.
  void SendOnePerWorker(std::map<WorkerConnection*, DispatchRequest> ops,
                        const std::function<void(absl::Status)>& join,
                        absl::Span<const PlannedShard> planned,
                        std::vector<std::shared_ptr<Array>>& outputs);
  // Adds `outputs` under the request's result handles (or new ones) and names them in
  // `response`.
  absl::Status AddOutputs(std::vector<std::shared_ptr<Array>> outputs,
                          const wire::LoadedExecutableExecuteRequest& request,
                          wire::LoadedExecutableExecuteResponse* response);
  // Colocated Python (session_colocated.cc). The compile is answered at once; a call
  // goes to the sidecar of each worker of the function's devices.
  absl::Status CompileColocated(const wire::CompileRequest& request, uint64_t op_id);
  absl::Status ExecuteColocated(const Executable& executable,
                                const wire::LoadedExecutableExecuteRequest& request,
                                wire::LoadedExecutableExecuteResponse* response);
  // Names each argument's shards in the call of the worker that holds them (shards on
  // hosts that do not run the function are left out).
  absl::Status AddColocatedInputs(const ColocatedProgram& program,
                                  const wire::LoadedExecutableExecuteRequest& request,
                                  std::map<WorkerConnection*, ColocatedCallRequest>* calls);
  // The session's hosts as its sidecars see them: one process each, in slice and host
  // order, with its devices (ColocatedCallRequest.hosts); fixed once made.
  const std::vector<ColocatedHost>& ColocatedWorld();
  // Each worker writes the shards it holds (one copy of each), straight to storage;
  // `resolve` gets the first failure, or OK once every shard is written.
  absl::Status WritePersisted(const PersistenceWrite& write,
                              const std::vector<std::shared_ptr<Array>>& arrays,
                              std::function<void(absl::Status)> resolve);
  // Each device's worker reads its shard from storage, in any sharding.
  absl::StatusOr<std::vector<std::shared_ptr<Array>>> ReadPersisted(
      const PersistenceRead& read, std::function<void(absl::Status)> resolve);
  // The first run of a profile program starts recording here and on the session's
  // workers; the next stops, gathers every process's spans and writes one trace file
  // where the request asks (returned).
  absl::StatusOr<std::string> Profile(const ProfileRequest& request);
  absl::Status HandleExecutableDestruct(const wire::LoadedExecutableDestructRequest& request);
  absl::Status HandleFetchExecuteResult(
      const wire::LoadedExecutableFetchExecuteResultRequest& request);
  absl::Status HandleGetDefaultDeviceAssignment(
      const wire::GetDefaultDeviceAssignmentRequest& request,
      wire::GetDefaultDeviceAssignmentResponse* response);

  // Helpers.
  uint64_t NewHandle();
  uint64_t NewFuture(absl::Status status);
  absl::StatusOr<const DeviceEntry*> SessionDevice(int64_t id) const;
  absl::StatusOr<WorkerConnection*> WorkerOf(int64_t device) const;
  // Answers `op_id` through `sink`: `status`, or OK with `fill` filling the response.
  static void AnswerLater(ResponseSink& sink, uint64_t op_id, const absl::Status& status,
                          const std::function<void(wire::IfrtResponse*)>& fill);
  // The part compiled on its worker's current epoch: compiled again if the worker
  // came back since; DATA_LOSS while it is down.
  absl::Status RefreshPart(const Executable& executable, ExecutablePart* part);
  // Compiles a program for a worker that is down on another of this session's workers
  // with the same plugin and device ordinals (for its metadata; that copy is dropped),
  // answering as if for the down worker. DATA_LOSS if no worker fits.
  absl::StatusOr<Compiled> CompileOnStandIn(WorkerConnection* down, const CompileRequest& compile);
  // What a compile of `compile` on `host` answers, from a real compile on another up,
  // real worker of this session with the same plugin (for a simulated host: platform)
  // and the devices' local ordinals; that copy is dropped, and the answer kept for the
  // next host that asks the same. NOT_FOUND if no worker fits.
  absl::StatusOr<CompileResponse> CompileForMetadata(WorkerConnection* host,
                                                     const CompileRequest& compile);
  // Compiles on `worker`; on a simulated host, the metadata of a real compile.
  absl::StatusOr<Compiled> CompileOn(WorkerConnection* worker, const CompileRequest& request);
  // Cuts a host array into the shards `sharding` asks for and puts them on the workers.
  // A shard that is the whole dense buffer goes to its worker as the bytes arrive.
  absl::StatusOr<std::shared_ptr<Array>> PutHostArray(DType dtype, std::vector<int64_t> shape,
                                                      Sharding sharding,
                                                      std::shared_ptr<const HostBuffer> host,
                                                      const std::vector<int64_t>& byte_strides);
  // Puts one shard on `device`: `bytes`, or where `arriving` is given, that upload's bytes
  // as they arrive (read with StreamFor when the put streams it: plane.streamed). On a
  // lost worker, a lost shard.
  absl::StatusOr<std::shared_ptr<RemoteBuffer>> PutShard(int64_t device, DType dtype,
                                                         const std::vector<int64_t>& shape,
                                                         const std::string& memory_kind,
                                                         const HostBuffer* arriving,
                                                         absl::string_view bytes,
                                                         const PutPlane& plane);
  // Gathers an array's shards into one host array laid out by `byte_strides`. Runs off
  // the session thread: touches nothing of the session but `calls_`.
  static absl::StatusOr<std::unique_ptr<HostBytes>> FetchArray(
      const Array& array, const std::vector<int64_t>& byte_strides, CallSet* calls);
  // Copies shard `index` of `array` to shard `index` of `copy`, on another device or
  // memory, worker to worker (sent with `batch`); shares it when it is already there.
  absl::Status CopyShard(const Array& array, size_t index, int64_t to_device,
                         const std::string& memory_kind, const std::shared_ptr<Array>& copy,
                         TransferBatch& batch);
  // Makes shard `index` of `copy` on `to_device` from `from`, which the destination
  // pulls worker to worker (sent with `batch`); from a lost shard or to a lost slice, a
  // lost shard.
  absl::Status CopyBuffer(const std::shared_ptr<RemoteBuffer>& from, DType dtype,
                          const std::vector<int64_t>& dims, int64_t to_device,
                          const std::string& memory_kind, const std::shared_ptr<Array>& copy,
                          size_t index, TransferBatch& batch);
  // Puts an upload of shape `shape` on the devices of shards `indices` of `array`, as a
  // whole shard each: streamed (`plane`, the request the upload's one reader) to the first
  // one that is up, then copied from there to the others with `batch`.
  absl::Status PutStreamed(const HostBuffer& host, const PutPlane& plane, DType dtype,
                           const std::vector<int64_t>& shape, const Sharding& sharding,
                           absl::Span<const int64_t> indices, const std::shared_ptr<Array>& array,
                           TransferBatch& batch);
  // The memory kind a sharding puts on `device`: its own, or the device's default.
  std::string MemoryKind(const Sharding& sharding, int64_t device) const;
  // A new array with `spec`'s sharding, built on the destination workers from pieces
  // of `array`'s shards pulled worker to worker; shards already in place are reused
  // when `reuse` allows it. The transfers go with `batch`.
  absl::StatusOr<std::shared_ptr<Array>> Reshard(const Array& array,
                                                 const ::xla::ifrt::ArraySpecProto& spec,
                                                 bool reuse, TransferBatch& batch);
  absl::StatusOr<std::shared_ptr<Executable>> GetExecutable(uint64_t handle) const;
  // Where a put of bytes `owner` keeps may go (PutPlane), stopped by the session's end.
  PutPlane UploadPlane(std::shared_ptr<const void> owner,
                       const HostBuffer* streamed = nullptr) const {
    return {policy_.upload_plane, std::move(owner), streamed, cancelled_};
  }

  const uint64_t id_;
  const Version version_;
  Fleet* fleet_;
  std::shared_ptr<HostBufferStore> host_buffers_;
  std::function<bool()> cancelled_;
  std::shared_ptr<ResponseSink> sink_;
  std::map<int64_t, DeviceEntry> devices_;  // this session's devices, from Init
  std::vector<WorkerConnection*> workers_;  // their workers
  // Some multi-host launch had the RM's gang numbers: the session's end voids the rest.
  bool rm_gangs_ = false;
  ArrayTable arrays_;
  // Compiles finishing off the session thread add to it.
  mutable absl::Mutex executables_mutex_;
  std::map<uint64_t, std::shared_ptr<Executable>> executables_ ABSL_GUARDED_BY(executables_mutex_);
  std::map<uint64_t, absl::Status> futures_;
  // Resolved off the session thread (by worker answers, which may come after the
  // session has ended: they hold it shared).
  std::shared_ptr<LateFutures> late_futures_ = std::make_shared<LateFutures>();
  // Launches sent and not yet computed (shared with their completions, which may come
  // after the session is gone).
  std::shared_ptr<LaunchBudget> launches_ =
      std::make_shared<LaunchBudget>(limits::kSessionLaunchesInFlightMax);
  std::vector<ColocatedHost> colocated_world_;      // see ColocatedWorld()
  std::vector<WorkerConnection*> colocated_hosts_;  // parallel to it
  // A profile being taken: this process's window, and each worker's.
  uint64_t trace_window_ = 0;
  std::map<WorkerConnection*, uint64_t> worker_trace_windows_;
  uint64_t next_handle_;
  int64_t seq_num_ = 0;
  const SessionPolicy policy_;
  // Fetches in flight, on threads of the session's own; their worker calls are
  // cancelled and the threads joined when it ends.
  CallSet calls_;
  MetadataCache metadata_;  // of compiles on stand-ins
  TaskThreads fetches_{static_cast<int>(limits::kFetchesInFlightMax), "sy-fetch"};
  TaskThreads compiles_{static_cast<int>(limits::kCompilesInFlightMax), "sy-compile"};
};

}  // namespace switchyard::proxy
