// Session handlers for plugin programs: Pathways' persistence API (each worker writes
// and reads its own shards), profiling, and the side-channel reshard.

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "common/host_array.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/status_join.h"
#include "common/status_macros.h"
#include "common/trace.h"
#include "compile_cache/compile_cache.h"
#include "proxy/ifrt_convert.h"
#include "proxy/session.h"
#include "proxy/worker_calls.h"

namespace switchyard::proxy {
namespace {

// The chunk grid of a saved array is its sharding's tile grid: every shard is a chunk.
std::vector<int64_t> ChunkShape(const ShardLayout& layout, size_t rank) {
  std::vector<int64_t> chunks(rank, 1);
  for (size_t i = 0; i < layout.domains.size(); ++i) {
    if (!layout.holds[i]) continue;
    const std::vector<int64_t> shape = layout.domains[i].shape();
    for (size_t d = 0; d < rank; ++d) chunks[d] = std::max(chunks[d], shape[d]);
  }
  return chunks;
}

int64_t TimeoutMs(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return 0;
  return std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout));
}

// The devices a plugin program names, in order of first mention.
void AddDevices(const std::vector<int64_t>& devices, std::vector<int64_t>* all) {
  for (int64_t device : devices) {
    if (std::find(all->begin(), all->end(), device) == all->end()) all->push_back(device);
  }
}

}  // namespace

absl::Status Session::CompilePlugin(const wire::CompileRequest& request, uint64_t op_id) {
  if (request.compile_options().type_name() != kPluginCompileOptions) {
    return absl::InvalidArgumentError(absl::StrCat("Bad PluginProgram: compile options '",
                                                   request.compile_options().type_name(),
                                                   "' instead of ", kPluginCompileOptions));
  }
  SY_ASSIGN_OR_RETURN(PluginRequest plugin, ParsePluginProgram(request.program().data()));
  auto executable = std::make_shared<Executable>();
  executable->name = absl::StrCat("switchyard ", PluginRequestName(plugin));
  if (const auto* write = std::get_if<PersistenceWrite>(&plugin)) {
    for (const PersistedArray& array : write->arrays)
      AddDevices(array.devices, &executable->devices);
  } else if (const auto* read = std::get_if<PersistenceRead>(&plugin)) {
    for (const PersistedArray& array : read->arrays) {
      AddDevices(array.devices, &executable->devices);
      Sharding sharding{array.devices, std::nullopt, array.sharding};
      SY_ASSIGN_OR_RETURN(ShardLayout layout, LayoutShards(sharding, array.shape));
      executable->output_dtypes.push_back(array.dtype);
      executable->output_shard_dims.push_back(ChunkShape(layout, array.shape.size()));
      executable->output_shardings.push_back(array.sharding);
    }
    executable->shardings_known = true;
  } else if (const auto* reshard = std::get_if<ReshardRequest>(&plugin)) {
    for (const ReshardTarget& target : reshard->inputs)
      AddDevices(target.devices, &executable->devices);
  } else {
    if (devices_.empty()) return absl::FailedPreconditionError("session has no devices");
    executable->devices.push_back(devices_.begin()->first);
  }
  for (int64_t device : executable->devices) SY_RETURN_IF_ERROR(SessionDevice(device).status());
  executable->plugin = std::make_shared<const PluginRequest>(std::move(plugin));
  return AddServedExecutable(std::move(executable), op_id);
}

absl::Status Session::AddServedExecutable(std::shared_ptr<Executable> executable, uint64_t op_id) {
  const uint64_t handle = NewHandle();
  const uint64_t ready = NewFuture(absl::OkStatus());
  {
    absl::MutexLock lock(&executables_mutex_);
    executables_[handle] = executable;
  }
  AnswerLater(*sink_, op_id, absl::OkStatus(), [&](wire::IfrtResponse* answer) {
    wire::CompileResponse* response = answer->mutable_compile_response();
    response->set_loaded_executable_handle(handle);
    response->set_name(executable->name);
    response->set_num_devices(static_cast<int32_t>(executable->devices.size()));
    for (int64_t device : executable->devices) {
      response->add_device_ids(static_cast<int32_t>(device));
      response->add_addressable_device_ids(static_cast<int32_t>(device));
    }
    response->set_ready_future_handle(ready);
  });
  return absl::OkStatus();
}

void Session::SendOnePerWorker(std::map<WorkerConnection*, DispatchRequest> ops,
                               const std::function<void(absl::Status)>& join,
                               absl::Span<const PlannedShard> planned,
                               std::vector<std::shared_ptr<Array>>& outputs) {
  std::map<WorkerConnection*, absl::StatusOr<WorkerConnection::Ticket>> tickets;
  for (auto& [worker, op] : ops) {
    absl::StatusOr<WorkerConnection::Ticket> sent = worker->Send(id_, std::move(op), join);
    if (!sent.ok()) join(sent.status());  // `join` is not called by Send then
    tickets.emplace(worker, std::move(sent));
  }
  for (const PlannedShard& each : planned) {
    const absl::StatusOr<WorkerConnection::Ticket>& ticket = tickets.at(each.worker);
    outputs[each.array]->shards[each.slot] =
        ticket.ok() ? std::make_shared<RemoteBuffer>(each.worker, each.id, each.device, *ticket)
                    : RemoteBuffer::Lost(each.worker, each.device, ticket.status());
  }
}

absl::Status Session::AddOutputs(std::vector<std::shared_ptr<Array>> outputs,
                                 const wire::LoadedExecutableExecuteRequest& request,
                                 wire::LoadedExecutableExecuteResponse* response) {
  for (size_t o = 0; o < outputs.size(); ++o) {
    const uint64_t handle = o < static_cast<size_t>(request.result_array_handle_size())
                                ? request.result_array_handle(o)
                                : NewHandle();
    wire::LoadedExecutableExecuteResponse::Output* output = response->add_outputs();
    *output->mutable_dtype() = ToDTypeProto(outputs[o]->dtype);
    *output->mutable_shape() = ToShapeProto(outputs[o]->shape);
    *output->mutable_sharding() = ToProto(outputs[o]->sharding);
    output->set_array_handle(handle);
    SY_RETURN_IF_ERROR(arrays_.Add(handle, std::move(outputs[o])));
  }
  return absl::OkStatus();
}

absl::Status Session::ExecutePlugin(const Executable& executable,
                                    const wire::LoadedExecutableExecuteRequest& request,
                                    wire::LoadedExecutableExecuteResponse* response) {
  std::vector<std::shared_ptr<Array>> args;
  for (uint64_t handle : request.args_handles()) {
    SY_ASSIGN_OR_RETURN(auto array, arrays_.Get(handle));
    args.push_back(std::move(array));
  }
  // The token: resolved when the workers are done.
  const uint64_t status_handle =
      request.result_status_handle() != 0 ? request.result_status_handle() : NewHandle();
  std::shared_ptr<LateFutures> late = late_futures_;
  auto resolve = [late, status_handle](absl::Status status) {
    late->Resolve(status_handle, std::move(status));
  };
  std::vector<std::shared_ptr<Array>> outputs;
  const PluginRequest& plugin = *executable.plugin;
  if (const auto* write = std::get_if<PersistenceWrite>(&plugin)) {
    // Added before the workers can answer; a refused request resolves it at once, so
    // that no check of it waits for ever.
    late_futures_->Add(status_handle);
    absl::Status sent = WritePersisted(*write, args, resolve);
    if (!sent.ok()) late_futures_->Resolve(status_handle, sent);
    SY_RETURN_IF_ERROR(sent);
  } else if (const auto* read = std::get_if<PersistenceRead>(&plugin)) {
    if (!args.empty()) return absl::InvalidArgumentError("a persistence read takes no inputs");
    late_futures_->Add(status_handle);
    absl::StatusOr<std::vector<std::shared_ptr<Array>>> read_outputs =
        ReadPersisted(*read, resolve);
    if (!read_outputs.ok()) late_futures_->Resolve(status_handle, read_outputs.status());
    SY_ASSIGN_OR_RETURN(outputs, std::move(read_outputs));
  } else if (const auto* reshard = std::get_if<ReshardRequest>(&plugin)) {
    if (args.size() != reshard->outputs.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the reshard was compiled for ", reshard->outputs.size(), " arrays, not ", args.size()));
    }
    TransferBatch batch(id_, "reshard on");  // sent at the end, every array's at once
    for (size_t i = 0; i < args.size(); ++i) {
      const ReshardTarget& target = reshard->outputs[i];
      Sharding sharding{target.devices, std::nullopt, target.sharding};
      if (!target.memory_kind.empty()) sharding.memory_kind = target.memory_kind;
      ::xla::ifrt::ArraySpecProto spec;
      *spec.mutable_dtype() = ToDTypeProto(args[i]->dtype);
      *spec.mutable_shape() = ToShapeProto(args[i]->shape);
      *spec.mutable_sharding() = ToProto(sharding);
      SY_ASSIGN_OR_RETURN(auto out, Reshard(*args[i], spec, /*reuse=*/true, batch));
      outputs.push_back(std::move(out));
    }
    batch.Send();
    if (reshard->donate) {
      for (auto& arg : args) {
        arg->deleted = true;
        arg->shards.clear();
      }
    }
    futures_[status_handle] = absl::OkStatus();  // errors travel with the outputs
  } else {
    const auto& profile = std::get<ProfileRequest>(plugin);
    SY_RETURN_IF_ERROR(Profile(profile).status());
    futures_[status_handle] = absl::OkStatus();
    if (profile.wants_output) {
      // pathwaysutils waits on one (1,) output of object dtype; nothing reads it.
      auto token = std::make_shared<Array>();
      token->shape = {1};
      token->sharding = SingleDevice(executable.devices.front());
      token->shards.resize(1);
      const uint64_t handle =
          request.result_array_handle_size() > 0 ? request.result_array_handle(0) : NewHandle();
      wire::LoadedExecutableExecuteResponse::Output* output = response->add_outputs();
      output->mutable_dtype()->set_kind(::xla::ifrt::DTypeProto::KIND_STRING);
      *output->mutable_shape() = ToShapeProto(token->shape);
      *output->mutable_sharding() = ToProto(token->sharding);
      output->set_array_handle(handle);
      SY_RETURN_IF_ERROR(arrays_.Add(handle, std::move(token)));
    }
  }
  SY_RETURN_IF_ERROR(AddOutputs(std::move(outputs), request, response));
  response->set_status_handle(status_handle);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Session::Profile(const ProfileRequest& request) {
  if (trace_window_ == 0) {
    trace_window_ = trace::Begin();
    for (WorkerConnection* worker : workers_) {
      if (!worker->up()) continue;
      TraceRequest start;
      start.set_start(true);
      absl::StatusOr<TraceResponse> started = Trace(worker, start);
      if (started.ok()) {
        worker_trace_windows_[worker] = started->window();
      } else {
        SY_LOG(Warning) << "session " << policy_.label << ": no profile of slice "
                        << worker->slice_index() << " host " << worker->host_index() << ": "
                        << started.status();
      }
    }
    SY_LOG(Info) << "session " << policy_.label << ": taking a profile for " << request.location;
    return std::string();
  }
  std::vector<trace::ProcessTrace> processes(1);
  int64_t dropped = 0;
  processes[0].name = "proxy";
  processes[0].spans = trace::End(std::exchange(trace_window_, 0), id_, &dropped);
  processes[0].lanes = trace::LaneNames();
  std::map<WorkerConnection*, uint64_t> windows;
  windows.swap(worker_trace_windows_);
  for (WorkerConnection* worker : workers_) {
    auto window = windows.find(worker);
    if (window == windows.end() || !worker->up()) continue;
    TraceRequest stop;
    stop.set_window(window->second);
    stop.set_session(id_);
    absl::StatusOr<TraceResponse> traced = Trace(worker, stop);
    if (!traced.ok()) continue;  // the others' rows are kept
    trace::ProcessTrace process;
    process.name = absl::StrCat("worker s", worker->slice_index(), "h", worker->host_index(), " (",
                                worker->address(), ")");
    for (const TraceSpan& span : traced->spans()) {
      process.spans.push_back(
          {span.name(), span.category(), span.start_unix_ns(), span.duration_ns(), span.lane()});
    }
    process.lanes.insert(traced->lanes().begin(), traced->lanes().end());
    dropped += traced->dropped();
    processes.push_back(std::move(process));
  }
  if (dropped > 0) {
    SY_LOG(Warning) << "session " << policy_.label << ": the profile dropped " << dropped
                    << " spans past the bound";
  }
  // TensorBoard's profile plugin reads <logdir>/plugins/profile/<run>/<host>.trace.json.gz;
  // Perfetto opens the same file.
  SY_ASSIGN_OR_RETURN(std::string location,
                      compile_cache::ResolveLocation(request.location, policy_.storage_mount_root));
  std::string run = request.session_name.empty()
                        ? absl::FormatTime("%Y_%m_%d_%H_%M_%S", absl::Now(), absl::UTCTimeZone())
                        : request.session_name;
  for (char& c : run) {
    if (!absl::ascii_isalnum(c) && c != '_' && c != '-' && c != '.') c = '_';
  }
  if (run.empty() || run[0] == '.') run.insert(0, "run");
  const std::string dir = absl::StrCat(location, "/plugins/profile/", run);
  SY_RETURN_IF_ERROR(MakeDirectories(dir));
  const std::string path = absl::StrCat(dir, "/switchyard.trace.json.gz");
  SY_RETURN_IF_ERROR(WriteGzipFile(path, trace::ChromeTraceJson(processes)));
  SY_LOG(Info) << "session " << policy_.label << ": profile written to " << path;
  return path;
}

absl::Status Session::WritePersisted(const PersistenceWrite& write,
                                     const std::vector<std::shared_ptr<Array>>& arrays,
                                     std::function<void(absl::Status)> resolve) {
  if (arrays.size() != write.arrays.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the persistence write names ",
                                                   write.arrays.size(), " arrays; ", arrays.size(),
                                                   " were given"));
  }
  // Per worker, the shards it writes; each distinct shard once, from a live copy.
  struct Batch {
    SaveShardsRequest request;
    uint64_t epoch = 0;
  };
  std::map<WorkerConnection*, Batch> batches;
  for (size_t i = 0; i < arrays.size(); ++i) {
    const Array& array = *arrays[i];
    const PersistedArray& named = write.arrays[i];
    if (array.shape != named.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("array '", named.name, "' has shape [", absl::StrJoin(array.shape, ","),
                       "], the write names [", absl::StrJoin(named.shape, ","), "]"));
    }
    SY_ASSIGN_OR_RETURN(ShardLayout layout, LayoutShards(array.sharding, array.shape));
    const std::vector<int64_t> chunks = ChunkShape(layout, array.shape.size());
    std::set<std::vector<int64_t>> written;
    for (size_t s = 0; s < array.shards.size(); ++s) {
      if (!layout.holds[s] || array.shards[s] == nullptr) continue;
      const IndexDomain& domain = layout.domains[s];
      if (written.count(domain.start)) continue;
      // A copy on a live worker, if there is one.
      size_t source = s;
      for (size_t t = s; t < array.shards.size(); ++t) {
        if (layout.holds[t] && array.shards[t] != nullptr && layout.domains[t] == domain &&
            array.shards[t]->Usable().ok()) {
          source = t;
          break;
        }
      }
      const RemoteBuffer& shard = *array.shards[source];
      if (absl::Status usable = shard.Usable(); !usable.ok()) {
        return absl::Status(usable.code(),
                            absl::StrCat("array '", named.name, "': ", usable.message()));
      }
      written.insert(domain.start);
      Batch& batch = batches[shard.worker()];
      if (batch.request.shards().empty()) batch.epoch = shard.made().epoch;
      StoredShard* item = batch.request.add_shards();
      item->set_buffer_id(shard.id());
      item->set_device_id(shard.device());
      item->set_location(named.location);
      item->set_name(named.name);
      item->set_dtype(array.dtype);
      item->mutable_shape()->Add(array.shape.begin(), array.shape.end());
      item->mutable_chunks()->Add(chunks.begin(), chunks.end());
      item->mutable_start()->Add(domain.start.begin(), domain.start.end());
      const std::vector<int64_t> dims = domain.shape();
      item->mutable_dims()->Add(dims.begin(), dims.end());
      item->set_metadata(
          std::all_of(domain.start.begin(), domain.start.end(), [](int64_t x) { return x == 0; }));
    }
    if (written.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("array '", named.name, "' has no shards"));
    }
  }
  int64_t timeout_ms = 0;
  for (const PersistedArray& named : write.arrays) {
    const int64_t each = TimeoutMs(named.timeout);
    if (each > 0) timeout_ms = timeout_ms == 0 ? each : std::min(timeout_ms, each);
  }
  auto join = JoinStatuses(batches.size(), std::move(resolve));
  for (auto& [worker, batch] : batches) {
    batch.request.set_timeout_ms(timeout_ms);
    DispatchRequest op;
    batch.request.set_session(id_);
    *op.mutable_save_shards() = std::move(batch.request);
    absl::StatusOr<WorkerConnection::Ticket> sent =
        worker->Send(id_, std::move(op), join, batch.epoch);
    if (!sent.ok()) join(sent.status());  // `join` is not called by Send then
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::shared_ptr<Array>>> Session::ReadPersisted(
    const PersistenceRead& read, std::function<void(absl::Status)> resolve) {
  std::vector<std::shared_ptr<Array>> outputs;
  std::map<WorkerConnection*, LoadShardsRequest> batches;
  std::vector<PlannedShard> planned;
  for (size_t i = 0; i < read.arrays.size(); ++i) {
    const PersistedArray& named = read.arrays[i];
    auto array = std::make_shared<Array>();
    array->dtype = named.dtype;
    array->shape = named.shape;
    array->sharding = Sharding{named.devices, std::nullopt, named.sharding};
    SY_ASSIGN_OR_RETURN(ShardLayout layout, LayoutShards(array->sharding, array->shape));
    array->shards.resize(named.devices.size());
    for (size_t s = 0; s < named.devices.size(); ++s) {
      if (!layout.holds[s]) continue;
      const int64_t device = named.devices[s];
      SY_ASSIGN_OR_RETURN(WorkerConnection * worker, WorkerOf(device));
      StoredShard* item = batches[worker].add_shards();
      const uint64_t id = NewWorkerObjectId();
      item->set_buffer_id(id);
      item->set_device_id(device);
      item->set_location(named.location);
      item->set_name(named.name);
      item->set_dtype(named.dtype);
      item->mutable_shape()->Add(named.shape.begin(), named.shape.end());
      const IndexDomain& domain = layout.domains[s];
      item->mutable_start()->Add(domain.start.begin(), domain.start.end());
      const std::vector<int64_t> dims = domain.shape();
      item->mutable_dims()->Add(dims.begin(), dims.end());
      planned.push_back({worker, id, device, i, s});
    }
    outputs.push_back(std::move(array));
  }
  int64_t timeout_ms = 0;
  for (const PersistedArray& named : read.arrays) {
    const int64_t each = TimeoutMs(named.timeout);
    if (each > 0) timeout_ms = timeout_ms == 0 ? each : std::min(timeout_ms, each);
  }
  // Sent, not awaited: a failed read stores its error under the new buffers, and the
  // token reports it.
  std::map<WorkerConnection*, DispatchRequest> ops;
  for (auto& [worker, batch] : batches) {
    batch.set_timeout_ms(timeout_ms);
    batch.set_session(id_);
    *ops[worker].mutable_load_shards() = std::move(batch);
  }
  auto join = JoinStatuses(ops.size(), std::move(resolve));
  SendOnePerWorker(std::move(ops), join, planned, outputs);
  return outputs;
}

}  // namespace switchyard::proxy
