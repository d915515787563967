// Session handlers for colocated Python (jax.experimental.colocated_python): the
// client's pickled function runs in a sidecar on each worker of its devices, on that
// worker's shards; the proxy only routes shard ids.

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_join.h"
#include "common/status_macros.h"
#include "proxy/ifrt_convert.h"
#include "proxy/session.h"
#include "switchyard/worker.pb.h"

namespace switchyard::proxy {
namespace {

absl::StatusOr<ColocatedSpec> ParseSpec(const ::xla::ifrt::ArraySpecProto& proto) {
  ColocatedSpec spec;
  SY_ASSIGN_OR_RETURN(spec.dtype, FromDTypeProto(proto.dtype()));
  SY_ASSIGN_OR_RETURN(spec.shape, FromShapeProto(proto.shape()));
  SY_ASSIGN_OR_RETURN(spec.sharding, ParseSharding(proto.sharding()));
  SY_RETURN_IF_ERROR(LayoutShards(spec.sharding, spec.shape).status());
  return spec;
}

}  // namespace

absl::Status Session::CompileColocated(const wire::CompileRequest& request, uint64_t op_id) {
  ::xla::ifrt::CustomCallProgramProto proto;
  if (!proto.ParseFromString(request.program().data())) {
    return absl::InvalidArgumentError("malformed CustomCallProgram");
  }
  if (proto.type() != kColocatedPythonType) {
    return absl::UnimplementedError(absl::StrCat("custom call programs of type '", proto.type(),
                                                 "' are not supported; Switchyard runs '",
                                                 kColocatedPythonType, "' (colocated Python)"));
  }
  auto program = std::make_shared<ColocatedProgram>();
  program->name = proto.name();
  program->pickled = proto.serialized_program_text();
  for (const auto& spec : proto.input_specs()) {
    SY_ASSIGN_OR_RETURN(ColocatedSpec parsed, ParseSpec(spec));
    program->inputs.push_back(std::move(parsed));
  }
  for (const auto& spec : proto.output_specs()) {
    SY_ASSIGN_OR_RETURN(ColocatedSpec parsed, ParseSpec(spec));
    program->outputs.push_back(std::move(parsed));
  }
  auto executable = std::make_shared<Executable>();
  executable->name = proto.name();
  for (int32_t device : proto.devices().device_ids()) {
    SY_RETURN_IF_ERROR(SessionDevice(device).status());
    if (std::find(executable->devices.begin(), executable->devices.end(), device) ==
        executable->devices.end()) {
      executable->devices.push_back(device);
    }
  }
  if (executable->devices.empty()) {
    return absl::InvalidArgumentError("a colocated Python program needs devices");
  }
  executable->colocated = std::move(program);
  return AddServedExecutable(std::move(executable), op_id);
}

const std::vector<ColocatedHost>& Session::ColocatedWorld() {
  if (!colocated_world_.empty()) return colocated_world_;
  // Every worker of the session, whether or not a call uses it, so that a session's
  // sidecars keep one world (and their state) across calls on different devices.
  std::map<std::tuple<int64_t, int64_t, WorkerConnection*>,
           std::vector<std::pair<int64_t, int64_t>>>
      hosts;
  for (const auto& [id, entry] : devices_) {
    hosts[{entry.info.slice_index(), entry.info.host_index(), entry.worker}].push_back(
        {entry.info.local_ordinal(), id});
  }
  for (auto& [key, devices] : hosts) {
    std::sort(devices.begin(), devices.end());
    ColocatedHost host;
    for (const auto& [ordinal, id] : devices) host.add_device_ids(id);
    colocated_world_.push_back(std::move(host));
    colocated_hosts_.push_back(std::get<2>(key));
  }
  return colocated_world_;
}

absl::Status Session::AddColocatedInputs(const ColocatedProgram& program,
                                         const wire::LoadedExecutableExecuteRequest& request,
                                         std::map<WorkerConnection*, ColocatedCallRequest>* calls) {
  for (size_t i = 0; i < program.inputs.size(); ++i) {
    SY_ASSIGN_OR_RETURN(std::shared_ptr<Array> arg, arrays_.Get(request.args_handles(i)));
    const ColocatedSpec& spec = program.inputs[i];
    if (arg->dtype != spec.dtype || arg->shape != spec.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "colocated Python function '", program.name, "': input ", i, " is ",
          DType_Name(arg->dtype), "[", absl::StrJoin(arg->shape, ","), "], compiled for ",
          DType_Name(spec.dtype), "[", absl::StrJoin(spec.shape, ","), "]"));
    }
    SY_RETURN_IF_ERROR(arg->Usable());
    SY_ASSIGN_OR_RETURN(ShardLayout layout, LayoutShards(arg->sharding, arg->shape));
    for (size_t s = 0; s < arg->shards.size(); ++s) {
      if (!layout.holds[s] || arg->shards[s] == nullptr) continue;
      const RemoteBuffer& shard = *arg->shards[s];
      auto call = calls->find(shard.worker());
      if (call == calls->end()) continue;  // not a host of the function's devices
      ColocatedShard* item = call->second.mutable_inputs(i)->add_shards();
      item->set_buffer_id(shard.id());
      item->set_device_id(shard.device());
      item->set_dtype(arg->dtype);
      const std::vector<int64_t> dims = layout.domains[s].shape();
      item->mutable_dims()->Add(dims.begin(), dims.end());
    }
  }
  return absl::OkStatus();
}

absl::Status Session::ExecuteColocated(const Executable& executable,
                                       const wire::LoadedExecutableExecuteRequest& request,
                                       wire::LoadedExecutableExecuteResponse* response) {
  const ColocatedProgram& program = *executable.colocated;
  if (request.args_handles_size() != static_cast<int>(program.inputs.size())) {
    return absl::InvalidArgumentError(absl::StrCat("colocated Python function '", program.name,
                                                   "' takes ", program.inputs.size(),
                                                   " arrays, not ", request.args_handles_size()));
  }
  const std::vector<ColocatedHost>& world = ColocatedWorld();
  auto host_of = [&](WorkerConnection* worker) {
    return static_cast<int32_t>(
        std::find(colocated_hosts_.begin(), colocated_hosts_.end(), worker) -
        colocated_hosts_.begin());
  };
  std::map<WorkerConnection*, ColocatedCallRequest> calls;
  for (int64_t device : executable.devices) {
    SY_ASSIGN_OR_RETURN(WorkerConnection * worker, WorkerOf(device));
    ColocatedCallRequest& call = calls[worker];
    if (call.inputs_size() > 0 || !call.name().empty()) continue;
    call.set_session(id_);
    call.set_name(program.name);
    call.set_program(program.pickled);
    *call.mutable_hosts() = {world.begin(), world.end()};
    call.set_host(host_of(worker));
    for (size_t i = 0; i < program.inputs.size(); ++i) call.add_inputs();
  }
  SY_RETURN_IF_ERROR(AddColocatedInputs(program, request, &calls));
  std::vector<PlannedShard> planned;
  std::vector<std::shared_ptr<Array>> outputs;
  for (auto& [worker, call] : calls) {
    for (size_t o = 0; o < program.outputs.size(); ++o) call.add_outputs();
  }
  for (size_t o = 0; o < program.outputs.size(); ++o) {
    const ColocatedSpec& spec = program.outputs[o];
    auto array = std::make_shared<Array>();
    array->dtype = spec.dtype;
    array->shape = spec.shape;
    array->sharding = spec.sharding;
    array->shards.resize(spec.sharding.devices.size());
    SY_ASSIGN_OR_RETURN(ShardLayout layout, LayoutShards(spec.sharding, spec.shape));
    for (size_t s = 0; s < spec.sharding.devices.size(); ++s) {
      if (!layout.holds[s]) continue;
      const int64_t device = spec.sharding.devices[s];
      SY_ASSIGN_OR_RETURN(WorkerConnection * worker, WorkerOf(device));
      auto call = calls.find(worker);
      if (call == calls.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "colocated Python function '", program.name, "': output ", o, " has a shard on device ",
            device, ", whose host does not run the function"));
      }
      const uint64_t id = NewWorkerObjectId();
      ColocatedShard* item = call->second.mutable_outputs(o)->add_shards();
      item->set_buffer_id(id);
      item->set_device_id(device);
      item->set_dtype(spec.dtype);
      const std::vector<int64_t> dims = layout.domains[s].shape();
      item->mutable_dims()->Add(dims.begin(), dims.end());
      planned.push_back({worker, id, device, o, s});
    }
    outputs.push_back(std::move(array));
  }
  // The status future, when the client asks for one; errors also travel with the
  // outputs (stored under their ids on the workers).
  const bool fill_status = request.execute_options().fill_status();
  const uint64_t status_handle = !fill_status ? 0
                                 : request.result_status_handle() != 0
                                     ? request.result_status_handle()
                                     : NewHandle();
  if (fill_status) late_futures_->Add(status_handle);
  std::shared_ptr<LateFutures> late = late_futures_;
  auto join = JoinStatuses(calls.size(), [late, status_handle](absl::Status status) {
    if (status_handle != 0) late->Resolve(status_handle, std::move(status));
  });
  std::map<WorkerConnection*, DispatchRequest> ops;
  for (auto& [worker, call] : calls) *ops[worker].mutable_colocated_call() = std::move(call);
  SendOnePerWorker(std::move(ops), join, planned, outputs);
  SY_RETURN_IF_ERROR(AddOutputs(std::move(outputs), request, response));
  if (fill_status) response->set_status_handle(status_handle);
  return absl::OkStatus();
}

}  // namespace switchyard::proxy
