#include "proxy/session.h"

#include <algorithm>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/guarded.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/trace.h"
#include "proxy/ifrt_convert.h"
#include "proxy/worker_calls.h"

namespace switchyard::proxy {
namespace {

// The status future a CheckFuture or FetchExecuteResult request waits on; 0 for others.
uint64_t FutureChecked(const wire::IfrtRequest& request) {
  if (request.has_check_future_request()) return request.check_future_request().future_handle();
  if (request.has_loaded_executable_fetch_execute_result_request()) {
    return request.loaded_executable_fetch_execute_result_request().result_status_handle();
  }
  return 0;
}

// Handles the server mints start here; the client's stay below (common/types.h in
// the IFRT proxy: kServerGeneratedHandlesMinValue).
constexpr uint64_t kServerHandlesMin = uint64_t{1} << 48;
// A new session waits this long for the proxy's first view of the fleet.
constexpr absl::Duration kFleetViewTimeout = absl::Seconds(10);
// An ending session waits this long for each worker to take its deletions.
constexpr absl::Duration kEndFlushTimeout = absl::Seconds(30);

std::string RequestName(const wire::IfrtRequest& request) {
  const auto* field =
      wire::IfrtRequest::descriptor()->FindFieldByNumber(static_cast<int>(request.request_case()));
  return field == nullptr ? absl::StrCat("request type ", request.request_case()) : field->name();
}

}  // namespace

Executable::~Executable() {
  // On each worker's operation stream, so after every launch already sent for it. A
  // part of an ended epoch is the worker's to free (its owner's lease runs out).
  for (const ExecutablePart& part : parts) {
    if (!part.worker->CheckEpoch(part.epoch).ok()) continue;
    DispatchRequest op;
    op.mutable_delete_executables()->add_executable_ids(part.worker_id);
    part.worker->SendAfter(lane, std::move(op));
  }
}

Session::Session(uint64_t id, Version version, Fleet* fleet,
                 std::shared_ptr<HostBufferStore> host_buffers, std::function<bool()> cancelled,
                 std::shared_ptr<ResponseSink> sink, SessionPolicy policy)
    : id_(id),
      version_(version),
      fleet_(fleet),
      host_buffers_(std::move(host_buffers)),
      cancelled_(std::move(cancelled)),
      sink_(std::move(sink)),
      next_handle_(kServerHandlesMin),
      policy_(std::move(policy)) {}

Session::~Session() {
  // Fetches still running answer nobody now; they stop at once. Launches not started
  // yet are dropped: nobody will read their outputs.
  calls_.CancelAll();
  late_futures_->FailAll(absl::CancelledError("the session ended"));
  // A profile never stopped: its windows close, so recording stops when no other is open.
  if (trace_window_ != 0) trace::End(trace_window_, id_);
  for (const auto& [worker, window] : worker_trace_windows_) {
    if (!worker->up()) continue;
    TraceRequest stop;
    stop.set_window(window);
    (void)Trace(worker, stop);
  }
  fetches_.Stop();
  compiles_.Stop();
  for (WorkerConnection* worker : workers_) {
    if (worker->up()) CancelLaunches(worker, id_);
  }
  // Arrays release their worker buffers; executables their worker programs.
  arrays_.Clear();
  std::map<uint64_t, std::shared_ptr<Executable>> executables;
  {
    absl::MutexLock lock(&executables_mutex_);
    executables.swap(executables_);
  }
  executables.clear();
  for (WorkerConnection* worker : workers_) {
    absl::Status flushed = worker->Flush(id_, kEndFlushTimeout);
    if (absl::IsDeadlineExceeded(flushed)) {
      SY_LOG(Warning) << "session " << policy_.label << ": " << flushed.message()
                      << "; its lease on the worker frees the rest";
    }
    worker->CloseLane(id_, kEndFlushTimeout);
  }
  // What its lanes did not carry to the hosts never will: other sessions' launches on
  // those hosts need not wait for them.
  if (rm_gangs_) fleet_->VoidGangs(id_, nullptr);
}

absl::Status Session::Health() const {
  if (policy_.num_elastic_slices < 0) return absl::OkStatus();
  std::set<int> down;
  for (WorkerConnection* worker : workers_) {
    if (!worker->up()) down.insert(worker->slice_index());
  }
  if (static_cast<int>(down.size()) <= policy_.num_elastic_slices) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat("session ", policy_.label, " failed: ", down.size(), " of its slices are down (",
                   absl::StrJoin(down, ","),
                   "), more than --num_elastic_slices=", policy_.num_elastic_slices, " allows"));
}

uint64_t Session::NewHandle() { return next_handle_++; }

uint64_t Session::NewFuture(absl::Status status) {
  uint64_t handle = NewHandle();
  futures_[handle] = std::move(status);
  return handle;
}

absl::StatusOr<const DeviceEntry*> Session::SessionDevice(int64_t id) const {
  auto it = devices_.find(id);
  if (it == devices_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("device ", id, " is not one of this session's"));
  }
  return &it->second;
}

absl::StatusOr<WorkerConnection*> Session::WorkerOf(int64_t device) const {
  absl::StatusOr<const DeviceEntry*> entry = SessionDevice(device);
  if (!entry.ok()) return entry.status();
  return (*entry)->worker;
}

void Session::AnswerLater(ResponseSink& sink, uint64_t op_id, const absl::Status& status,
                          const std::function<void(wire::IfrtResponse*)>& fill) {
  wire::IfrtResponse response;
  response.mutable_response_metadata()->set_op_id(op_id);
  if (status.ok()) {
    fill(&response);
  } else {
    *response.mutable_response_metadata()->mutable_status() = ToStatusProto(status);
  }
  sink.Post(std::move(response));
}

std::optional<wire::IfrtResponse> Session::Process(const wire::IfrtRequest& request) {
  wire::IfrtResponse response;
  absl::Status status;
  // A failed request's error goes to the handles it would have made, never to one that
  // was already in use (a request that reuses a live handle fails; the array stays).
  const RequestKind* kind = FindRequestKind(request);  // null: answered below or refused
  std::vector<uint64_t> created = CreatedHandles(kind, request);
  created.erase(std::remove_if(created.begin(), created.end(),
                               [&](uint64_t handle) { return arrays_.Contains(handle); }),
                created.end());
  if (policy_.max_arrays > 0 && !created.empty() &&
      static_cast<int64_t>(arrays_.size() + created.size()) > policy_.max_arrays) {
    status = absl::ResourceExhaustedError(
        absl::StrCat("this session holds ", arrays_.size(), " arrays; the proxy allows ",
                     policy_.max_arrays, " a session (--session_max_arrays): free some first"));
  } else if (request.has_check_value_ready_request()) {
    std::optional<absl::Status> now;
    status = Guarded("CheckValueReady", [&] {
      return CheckValueReadyLater(request.check_value_ready_request(),
                                  request.request_metadata().op_id(), &now);
    });
    if (status.ok() && !now.has_value()) return std::nullopt;
    // Known at once: answered here, with no handoff to the sink's thread.
    if (status.ok()) status = *std::move(now);
    if (status.ok()) response.mutable_check_value_ready_response();
  } else if (const uint64_t future = FutureChecked(request);
             future != 0 &&
             late_futures_->Check(future, [sink = sink_, request](absl::Status status) {
               AnswerLater(*sink, request.request_metadata().op_id(), status,
                           [&](wire::IfrtResponse* answer) {
                             if (request.has_check_future_request()) {
                               answer->mutable_check_future_response();
                             } else {
                               answer->mutable_loaded_executable_fetch_execute_result_response();
                             }
                           });
             })) {
    return std::nullopt;  // answered when the future resolves
  } else if (request.has_compile_request()) {
    status = Guarded("Compile", [&] {
      return CompileLater(request.compile_request(), request.request_metadata().op_id());
    });
    if (status.ok()) return std::nullopt;
  } else if (request.has_copy_to_host_buffer_request()) {
    trace::Scoped span("copy_to_host_buffer_request", "request", id_);
    bool answered = false;
    status = Guarded("CopyToHostBuffer", [&] {
      return CopyToHostBufferLater(request.copy_to_host_buffer_request(),
                                   request.request_metadata().op_id(), &answered);
    });
    if (status.ok() && !answered) return std::nullopt;
    if (status.ok()) response.mutable_copy_to_host_buffer_response();
  } else {
    trace::Scoped span(RequestName(request), "request", id_);
    status = Guarded(RequestName(request), [&] { return Dispatch(kind, request, &response); });
  }
  response.mutable_response_metadata()->set_op_id(request.request_metadata().op_id());
  if (status.ok()) {
    response.mutable_response_metadata()->set_seq_num(seq_num_++);
    return response;
  }
  // Past the quota, refused requests' handles still carry why (a client that made them
  // asynchronously learns it where it uses them), but only so many: a client that keeps
  // asking must not grow the table without bound.
  if (policy_.max_arrays <= 0 || static_cast<int64_t>(arrays_.size() + created.size()) <=
                                     policy_.max_arrays + limits::kRefusedHandlesMax) {
    for (uint64_t handle : created) arrays_.AddError(handle, status);
  }
  wire::IfrtResponse failed;
  failed.mutable_response_metadata()->set_op_id(request.request_metadata().op_id());
  *failed.mutable_response_metadata()->mutable_status() = ToStatusProto(status);
  return failed;
}

namespace {

template <typename List>
std::vector<uint64_t> All(const List& handles) {
  return {handles.begin(), handles.end()};
}

}  // namespace

// The session, its devices and its arrays.
void Session::AddArrayRequestKinds(RequestKinds& kinds) {
  using R = wire::IfrtRequest;
  using Out = wire::IfrtResponse;
  using Handles = std::vector<uint64_t>;
  kinds.insert({
      {R::kInitRequest,
       {[](Session& s, const R&, Out* out) { return s.HandleInit(out->mutable_init_response()); }}},
      {R::kCheckFutureRequest, {[](Session& s, const R& r, Out* out) {
         out->mutable_check_future_response();
         return s.HandleCheckFuture(r.check_future_request());
       }}},
      {R::kMakeArrayFromHostBufferRequest,
       {[](Session& s, const R& r, Out* out) {
          return s.HandleMakeArrayFromHostBuffer(
              r.make_array_from_host_buffer_request(),
              out->mutable_make_array_from_host_buffer_response());
        },
        [](const R& r) -> Handles {
          const auto& m = r.make_array_from_host_buffer_request();
          return {m.has_array_handle() ? m.array_handle() : m.host_buffer_handle()};
        }}},
      {R::kMakeArraysFromHostBufferShardsRequest,
       {[](Session& s, const R& r, Out* out) {
          return s.HandleMakeArraysFromHostBufferShards(
              r.make_arrays_from_host_buffer_shards_request(),
              out->mutable_make_arrays_from_host_buffer_shards_response());
        },
        [](const R& r) {
          return All(r.make_arrays_from_host_buffer_shards_request().array_handles());
        }}},
      {R::kAssembleArrayFromSingleDeviceArraysRequest,
       {[](Session& s, const R& r, Out* out) {
          return s.HandleAssemble(r.assemble_array_from_single_device_arrays_request(),
                                  out->mutable_assemble_array_from_single_device_arrays_response());
        },
        [](const R& r) -> Handles {
          return {r.assemble_array_from_single_device_arrays_request().result_handle()};
        }}},
      {R::kDisassembleIntoSingleDeviceArraysRequest,
       {[](Session& s, const R& r, Out* out) {
          return s.HandleDisassemble(r.disassemble_into_single_device_arrays_request(),
                                     out->mutable_disassemble_into_single_device_arrays_response());
        },
        [](const R& r) {
          return All(r.disassemble_into_single_device_arrays_request().result_handles());
        }}},
      {R::kFullyReplicatedShardRequest,
       {[](Session& s, const R& r, Out* out) {
          return s.HandleFullyReplicatedShard(r.fully_replicated_shard_request(),
                                              out->mutable_fully_replicated_shard_response());
        },
        [](const R& r) -> Handles {
          return {r.fully_replicated_shard_request().result_handle()};
        }}},
      {R::kCopyArraysRequest,
       {[](Session& s, const R& r, Out* out) {
          return s.HandleCopyArrays(r.copy_arrays_request(), out->mutable_copy_arrays_response());
        },
        [](const R& r) { return All(r.copy_arrays_request().result_handles()); }}},
      {R::kReshardArraysRequest,
       {[](Session& s, const R& r, Out* out) {
          return s.HandleReshardArrays(r.reshard_arrays_request(),
                                       out->mutable_reshard_arrays_response());
        },
        [](const R& r) { return All(r.reshard_arrays_request().result_handles()); }}},
      {R::kRemapArraysRequest,
       {[](Session& s, const R& r, Out* out) {
          return s.HandleRemapArrays(r.remap_arrays_request(),
                                     out->mutable_remap_arrays_response());
        },
        [](const R& r) { return All(r.remap_arrays_request().result_handles()); }}},
      {R::kBitcastArraysRequest,
       {nullptr, [](const R& r) { return All(r.bitcast_arrays_request().result_handles()); }}},
      {R::kMakeErrorArraysRequest,
       {[](Session& s, const R& r, Out* out) {
          return s.HandleMakeErrorArrays(r.make_error_arrays_request(),
                                         out->mutable_make_error_arrays_response());
        },
        [](const R& r) { return All(r.make_error_arrays_request().array_handles()); }}},
      {R::kDeleteArrayRequest, {[](Session& s, const R& r, Out* out) {
         return s.HandleDeleteArray(r.delete_array_request(), out->mutable_delete_array_response());
       }}},
      {R::kDestructArrayRequest, {[](Session& s, const R& r, Out* out) {
         out->mutable_destruct_array_response();
         return s.HandleDestructArray(r.destruct_array_request());
       }}},
      {R::kIsArrayDeletedRequest, {[](Session& s, const R& r, Out* out) {
         return s.HandleIsArrayDeleted(r.is_array_deleted_request(),
                                       out->mutable_is_array_deleted_response());
       }}},
      {R::kGetDefaultLayoutRequest, {[](Session& s, const R& r, Out* out) {
         return s.HandleGetDefaultLayout(r.get_default_layout_request(),
                                         out->mutable_get_default_layout_response());
       }}},
      {R::kGetDefaultDeviceAssignmentRequest, {[](Session& s, const R& r, Out* out) {
         return s.HandleGetDefaultDeviceAssignment(
             r.get_default_device_assignment_request(),
             out->mutable_get_default_device_assignment_response());
       }}},
  });
}

// Compiled programs (their compile is answered by Process).
void Session::AddExecutableRequestKinds(RequestKinds& kinds) {
  using R = wire::IfrtRequest;
  using Out = wire::IfrtResponse;
  kinds.insert({
      {R::kLoadedExecutableMetadataRequest, {[](Session& s, const R& r, Out* out) {
         return s.HandleExecutableMetadata(r.loaded_executable_metadata_request(),
                                           out->mutable_loaded_executable_metadata_response());
       }}},
      {R::kLoadedExecutableHumanReadableProgramTextRequest, {[](Session& s, const R& r, Out* out) {
         return s.HandleProgramText(
             r.loaded_executable_human_readable_program_text_request(),
             out->mutable_loaded_executable_human_readable_program_text_response());
       }}},
      {R::kLoadedExecutableCostAnalysisRequest, {[](Session& s, const R& r, Out* out) {
         return s.HandleCostAnalysis(r.loaded_executable_cost_analysis_request(),
                                     out->mutable_loaded_executable_cost_analysis_response());
       }}},
      {R::kLoadedExecutableExecuteRequest,
       {[](Session& s, const R& r, Out* out) {
          return s.HandleExecute(r.loaded_executable_execute_request(),
                                 out->mutable_loaded_executable_execute_response());
        },
        [](const R& r) {
          return All(r.loaded_executable_execute_request().result_array_handle());
        }}},
      {R::kLoadedExecutableDestructRequest, {[](Session& s, const R& r, Out* out) {
         out->mutable_loaded_executable_destruct_response();
         return s.HandleExecutableDestruct(r.loaded_executable_destruct_request());
       }}},
      {R::kLoadedExecutableFetchExecuteResultRequest, {[](Session& s, const R& r, Out* out) {
         out->mutable_loaded_executable_fetch_execute_result_response();
         return s.HandleFetchExecuteResult(r.loaded_executable_fetch_execute_result_request());
       }}},
      {R::kLoadedExecutableDeleteRequest, {[](Session& s, const R&, Out* out) {
         // Deprecated by the protocol; the reference answers a failing future too.
         out->mutable_loaded_executable_delete_response()->set_future_handle(
             s.NewFuture(absl::UnimplementedError("LoadedExecutable::Delete is not supported")));
         return absl::OkStatus();
       }}},
      {R::kLoadedExecutableIsDeletedRequest, {[](Session&, const R&, Out* out) {
         out->mutable_loaded_executable_is_deleted_response()->set_is_deleted(false);
         return absl::OkStatus();
       }}},
  });
}

const Session::RequestKind* Session::FindRequestKind(const wire::IfrtRequest& request) {
  // Process answers the requests that complete later (compiles, readiness, futures,
  // fetches) before it looks here; a kind with no `answer` is refused as unsupported.
  static const RequestKinds* const kinds = [] {
    auto* kinds = new RequestKinds;
    AddArrayRequestKinds(*kinds);
    AddExecutableRequestKinds(*kinds);
    return kinds;
  }();
  auto it = kinds->find(static_cast<int>(request.request_case()));
  return it == kinds->end() ? nullptr : &it->second;
}

std::vector<uint64_t> Session::CreatedHandles(const RequestKind* kind,
                                              const wire::IfrtRequest& request) {
  if (kind == nullptr || kind->created == nullptr) return {};
  std::vector<uint64_t> out = kind->created(request);
  out.erase(std::remove(out.begin(), out.end(), uint64_t{0}), out.end());
  return out;
}

absl::Status Session::Dispatch(const RequestKind* kind, const wire::IfrtRequest& request,
                               wire::IfrtResponse* response) {
  if (request.request_case() == wire::IfrtRequest::REQUEST_NOT_SET) {
    return absl::InvalidArgumentError("empty IfrtRequest: no request set");
  }
  if (kind == nullptr || kind->answer == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat(RequestName(request), " is not supported by Switchyard"));
  }
  return kind->answer(*this, request, response);
}

absl::Status Session::HandleInit(wire::InitResponse* response) {
  if (!devices_.empty()) return absl::FailedPreconditionError("session already initialized");
  SY_RETURN_IF_ERROR(fleet_->WaitForView(kFleetViewTimeout));
  std::string platform, platform_version;
  PluginInfo plugin;
  // Every device of the fleet, up or down: a slice that is down now keeps its devices
  // (and fails what touches them with DATA_LOSS) until it comes back.
  for (DeviceEntry& entry : fleet_->Devices()) {
    if (policy_.slices.has_value() && !policy_.slices->count(entry.info.slice_index())) continue;
    if (platform.empty()) {
      platform = entry.plugin.platform_name();
      platform_version = entry.plugin.platform_version();
      plugin = entry.plugin;
    } else if (entry.plugin.platform_name() != platform) {
      continue;  // one platform per session: the client lowers for one
    } else if (plugin.simulated() && !entry.plugin.simulated()) {
      // The client lowers for the real plugin that compiles for simulated hosts.
      platform_version = entry.plugin.platform_version();
      plugin = entry.plugin;
    }
    devices_[entry.info.global_id()] = entry;
    if (std::find(workers_.begin(), workers_.end(), entry.worker) == workers_.end()) {
      workers_.push_back(entry.worker);
    }
  }
  response->set_session_id(id_);
  response->set_platform_name(platform);
  response->set_platform_version(platform_version);
  response->set_process_index(0);
  response->set_runtime_type("pathways");
  int32_t next_memory_id = 0;
  for (const auto& [id, entry] : devices_) {
    const DeviceInfo& info = entry.info;
    wire::InitResponse::Device* device = response->add_all_devices();
    device->set_id(static_cast<int32_t>(id));
    device->set_local_device_id(static_cast<int32_t>(id));
    device->set_local_hardware_id(info.local_hardware_id());
    device->set_platform_name(platform);
    device->set_device_kind(info.kind());
    device->set_debug_string(absl::StrCat(platform, ":", id));
    device->set_to_string(absl::StrCat("SwitchyardDevice(id=", id, ", slice=", info.slice_index(),
                                       ", host=", info.host_index(), ")"));
    auto* attributes = device->mutable_attributes();
    SetAttribute(attributes, "slice_index", int64_t{info.slice_index()});
    // One per device: jax.experimental.colocated_python pairs each device with the CPU
    // device of the same id, and on CPU workers that is the device itself.
    SetAttribute(attributes, "colocation_id", static_cast<int64_t>(id));
    SetAttribute(attributes, "coords",
                 std::vector<int64_t>{info.local_ordinal(), info.host_index(), 0});
    SetAttribute(attributes, "core_on_chip", int64_t{0});
    SetAttribute(attributes, "host", entry.worker->address());
    for (const MemoryInfo& memory : info.memories()) {
      wire::InitResponse::Memory* m = response->add_memories();
      m->set_id(next_memory_id);
      m->set_memory_space_kind(memory.kind());
      m->add_device_ids(static_cast<int32_t>(id));
      m->set_debug_string(absl::StrCat(memory.kind(), ":", id));
      m->set_to_string(absl::StrCat("Memory(kind=", memory.kind(), ", device=", id, ")"));
      device->add_memory_ids(next_memory_id);
      if (memory.kind() == info.default_memory_kind())
        device->set_default_memory_id(next_memory_id);
      ++next_memory_id;
    }
    if (!device->has_default_memory_id() && device->memory_ids_size() > 0) {
      device->set_default_memory_id(device->memory_ids(0));
    }
    response->add_addressable_device_ids(static_cast<int32_t>(id));
    response->add_primary_device_ids(static_cast<int32_t>(id));
  }
  auto* attributes = response->mutable_client_attributes();
  SetAttribute(attributes, "serialize_with_sdy", true);
  SetAttribute(attributes, "supports_executable_serialization", false);
  SetAttribute(attributes, "xla_version", plugin.xla_version());
  SetAttribute(attributes, "pjrt_c_api_major_version", int64_t{plugin.pjrt_api_major()});
  SetAttribute(attributes, "pjrt_c_api_minor_version", int64_t{plugin.pjrt_api_minor()});
  std::vector<int64_t> stablehlo;
  for (absl::string_view part : absl::StrSplit(plugin.stablehlo_current_version(), '.')) {
    int64_t value = 0;
    if (absl::SimpleAtoi(part, &value)) stablehlo.push_back(value);
  }
  if (stablehlo.size() == 3) SetAttribute(attributes, "stablehlo_current_version", stablehlo);
  SY_LOG(Info) << "session " << policy_.label << ": " << devices_.size() << " " << platform
               << " devices, protocol " << version_.protocol << ", SerDes " << version_.serdes;
  return absl::OkStatus();
}

absl::Status Session::HandleCheckFuture(const wire::CheckFutureRequest& request) {
  auto it = futures_.find(request.future_handle());
  if (it == futures_.end()) {
    return absl::NotFoundError(absl::StrCat("Unknown future handle: ", request.future_handle()));
  }
  absl::Status status = std::move(it->second);
  futures_.erase(it);
  return status;
}

}  // namespace switchyard::proxy
