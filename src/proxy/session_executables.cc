// Session handlers for programs: compile on the owning worker, metadata, launch.

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/dimension_order.h"
#include "common/guarded.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/simulated_program.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "common/wire_numbers.h"
#include "proxy/ifrt_convert.h"
#include "proxy/session.h"
#include "proxy/worker_calls.h"
#include "xla/compile_options.pb.h"

namespace switchyard::proxy {
namespace {

using switchyard::xla::OpSharding;

constexpr char kXlaProgram[] = "xla::ifrt::XlaProgram";
constexpr char kXlaCompileOptions[] = "xla::ifrt::XlaCompileOptions";
// Marks a DATA_LOSS that already names the argument and program where it was first met.
constexpr char kLostArgument[] = "switchyard.lost_argument";

// The devices a program runs on, in launch order (replica-major, as XLA numbers
// logical devices), from its compile options.
absl::StatusOr<std::vector<int64_t>> ProgramDevices(const std::string& compile_options) {
  switchyard::xla::CompileOptionsProto options;
  if (!options.ParseFromString(compile_options)) {
    return absl::InvalidArgumentError("compile options are not a CompileOptionsProto");
  }
  const auto& assignment = options.executable_build_options().device_assignment();
  std::vector<int64_t> devices;
  const int64_t replicas = assignment.replica_count();
  const int64_t computations = assignment.computation_count();
  if (computations != assignment.computation_devices_size()) {
    return absl::InvalidArgumentError("device assignment is inconsistent");
  }
  SY_RETURN_IF_ERROR(
      CheckedProduct(replicas, computations, limits::kDevicesMax, "device assignment").status());
  for (int64_t r = 0; r < replicas; ++r) {
    for (int64_t c = 0; c < computations; ++c) {
      const auto& ids = assignment.computation_devices(c).replica_device_ids();
      if (r >= ids.size()) return absl::InvalidArgumentError("device assignment is inconsistent");
      devices.push_back(ids[r]);
    }
  }
  return devices;
}

// One sharding per output, from the module's (tuple) output sharding.
std::vector<OpSharding> SplitOutputSharding(const OpSharding& sharding, size_t outputs) {
  if (sharding.type() == OpSharding::TUPLE) {
    return {sharding.tuple_shardings().begin(), sharding.tuple_shardings().end()};
  }
  return std::vector<OpSharding>(outputs, sharding);
}

// A program may span workers only when they are the hosts of one multi-host PJRT
// client (one slice), whose plugin runs collectives across them.
absl::Status CheckMultiHostProgram(const std::vector<int64_t>& devices,
                                   const std::vector<const DeviceEntry*>& entries,
                                   size_t num_workers) {
  std::set<std::string> addresses;
  for (const DeviceEntry* entry : entries) addresses.insert(entry->worker->address());
  const DeviceEntry& first = *entries[0];
  for (const DeviceEntry* entry : entries) {
    const bool multi_host = entry->plugin.num_nodes() > 1;
    if (!multi_host || entry->info.slice_index() != first.info.slice_index()) {
      return absl::UnimplementedError(absl::StrCat(
          "the program's ", devices.size(), " devices [", absl::StrJoin(devices, ","), "] span ",
          num_workers, " workers (", absl::StrJoin(addresses, ", "), ")",
          multi_host ? " of different slices"
                     : absl::StrCat(", but worker ", entry->worker->address(), " (",
                                    entry->plugin.platform_name(),
                                    ") is not a host of a multi-host PJRT client (--num_nodes)"),
          ". A program runs within one worker, or within the hosts of one slice whose plugin "
          "forms one client across them (GPU); the CPU plugin has no collectives across "
          "processes. Use a mesh of one slice's devices (jax.pmap: pass "
          "devices=switchyard.slice_devices(0); jit/shard_map: a Mesh of those devices), and "
          "move data between slices."));
    }
  }
  return absl::OkStatus();
}

OpSharding Replicated() {
  OpSharding op;
  op.set_type(OpSharding::REPLICATED);
  return op;
}

}  // namespace

absl::StatusOr<std::shared_ptr<Executable>> Session::GetExecutable(uint64_t handle) const {
  absl::MutexLock lock(&executables_mutex_);
  auto it = executables_.find(handle);
  if (it == executables_.end()) {
    return absl::NotFoundError(absl::StrCat("Unknown loaded executable handle: ", handle));
  }
  return it->second;
}

absl::Status Session::CompileLater(const wire::CompileRequest& request, uint64_t op_id) {
  if (request.program().type_name() == kPluginProgram) return CompilePlugin(request, op_id);
  if (request.program().type_name() == kCustomCallProgram) return CompileColocated(request, op_id);
  if (request.program().type_name() != kXlaProgram) {
    return absl::UnimplementedError(absl::StrCat("Switchyard compiles XLA programs only, not '",
                                                 request.program().type_name(), "'"));
  }
  if (request.host_callbacks_size() > 0) {
    return absl::UnimplementedError(
        "host callbacks of the send/recv kind are not supported; on CPU workers, "
        "switchyard.initialize() serves jax.debug.print, pure_callback and io_callback");
  }
  if (request.compile_options().type_name() != kXlaCompileOptions) {
    return absl::UnimplementedError(absl::StrCat("unsupported compile options type '",
                                                 request.compile_options().type_name(), "'"));
  }
  ::xla::ifrt::XlaCompileOptionsProto options;
  if (!options.ParseFromString(request.compile_options().data())) {
    return absl::InvalidArgumentError("malformed XlaCompileOptions");
  }
  SY_ASSIGN_OR_RETURN(std::vector<int64_t> devices, ProgramDevices(options.compile_options()));
  if (devices.empty()) {
    if (devices_.empty()) return absl::FailedPreconditionError("session has no devices");
    devices.push_back(devices_.begin()->first);
  }
  // The workers the program runs on, in the order its devices name them.
  std::vector<WorkerConnection*> workers;
  std::vector<const DeviceEntry*> entries;
  for (int64_t device : devices) {
    SY_ASSIGN_OR_RETURN(const DeviceEntry* entry, SessionDevice(device));
    entries.push_back(entry);
    SY_ASSIGN_OR_RETURN(WorkerConnection * worker, WorkerOf(device));
    if (std::find(workers.begin(), workers.end(), worker) == workers.end()) {
      workers.push_back(worker);
    }
  }
  CompileRequest compile;
  compile.set_program(request.program().data());
  compile.set_format("mlir");
  compile.set_compile_options(options.compile_options());
  compile.mutable_device_ids()->Add(devices.begin(), devices.end());
  if (workers.size() > 1) {
    SY_RETURN_IF_ERROR(CheckMultiHostProgram(devices, entries, workers.size()));
    for (const DeviceEntry* entry : entries) {
      (*compile.mutable_peer_plugin_ids())[entry->info.global_id()] = entry->info.plugin_id();
    }
  }
  // Every worker compiles the same program with the global assignment, at once.
  auto pending = std::make_shared<PendingCompile>();
  pending->devices = std::move(devices);
  pending->workers = workers;
  pending->requests.assign(workers.size(), compile);
  pending->compiled.assign(workers.size(), absl::UnknownError("not compiled"));
  pending->compile = std::move(compile);
  if (workers.size() == 1 && !workers[0]->up()) {
    // The slice is down: the client still gets its executable now (pathwaysutils'
    // health checks compile for every slice, the lost one too), from a stand-in; its
    // launches fail with DATA_LOSS until the slice returns and it is compiled there.
    pending->compiled[0] = CompileOnStandIn(workers[0], pending->compile);
    pending->requests[0].set_executable_id(0);  // no copy on the slice yet
    pending->done = true;
  } else {
    for (CompileRequest& each : pending->requests) each.set_executable_id(NewWorkerObjectId());
  }
  pending->handle = NewHandle();
  pending->ready_future = NewFuture(absl::OkStatus());
  // The compile runs off the request loop: the client's other requests go on meanwhile.
  // It touches nothing of the session but `calls_` and, once done, `executables_`.
  compiles_.Run([this, pending, op_id] {
    absl::StatusOr<std::shared_ptr<Executable>> executable =
        Guarded("Compile", [&] { return FinishCompile(*pending); });
    if (executable.ok()) {
      absl::MutexLock lock(&executables_mutex_);
      executables_[pending->handle] = *executable;
    }
    AnswerLater(*sink_, op_id, executable.status(), [&](wire::IfrtResponse* answer) {
      wire::CompileResponse* response = answer->mutable_compile_response();
      response->set_loaded_executable_handle(pending->handle);
      response->set_name((*executable)->name);
      response->set_num_devices(static_cast<int32_t>((*executable)->devices.size()));
      for (int64_t device : (*executable)->devices) {
        response->add_device_ids(static_cast<int32_t>(device));
        response->add_addressable_device_ids(static_cast<int32_t>(device));
      }
      response->set_ready_future_handle(pending->ready_future);
    });
  });
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Executable>> Session::FinishCompile(PendingCompile& pending) {
  std::vector<WorkerConnection*>& workers = pending.workers;
  std::vector<CompileRequest>& requests = pending.requests;
  std::vector<absl::StatusOr<Compiled>>& compiled = pending.compiled;
  if (!pending.done) {
    std::vector<std::thread> threads;
    for (size_t w = 0; w < workers.size(); ++w) {
      auto run = [&, w] {
        if (workers.size() > 1) NameThisThread("sy-compile");
        compiled[w] = CompileOn(workers[w], requests[w]);
      };
      if (workers.size() == 1) {
        run();
      } else {
        threads.emplace_back(run);
      }
    }
    for (std::thread& thread : threads) thread.join();
  }
  auto executable = std::make_shared<Executable>();
  executable->lane = id_;
  executable->request = std::move(pending.compile);
  absl::Status failed;
  for (size_t w = 0; w < workers.size(); ++w) {
    if (!compiled[w].ok()) {
      if (failed.ok()) failed = compiled[w].status();
      continue;
    }
    ExecutablePart part;
    part.worker = workers[w];
    part.worker_id = requests[w].executable_id();
    part.epoch = compiled[w]->epoch;
    part.devices.assign(compiled[w]->response.device_ids().begin(),
                        compiled[w]->response.device_ids().end());
    executable->parts.push_back(std::move(part));  // deleted with `executable` on failure
  }
  SY_RETURN_IF_ERROR(failed);
  const CompileResponse& first = compiled[0]->response;
  executable->name = first.name();
  if (workers.size() == 1) {
    executable->devices = executable->parts[0].devices;
  } else {
    executable->devices = pending.devices;
  }
  for (const OutputSpec& output : first.outputs()) {
    executable->output_dtypes.push_back(output.dtype());
    executable->output_shard_dims.emplace_back(output.dims().begin(), output.dims().end());
    executable->output_layouts.emplace_back(output.minor_to_major().begin(),
                                            output.minor_to_major().end());
  }
  for (const DimensionOrder& order : first.parameter_layouts()) {
    executable->parameter_layouts.emplace_back(order.minor_to_major().begin(),
                                               order.minor_to_major().end());
  }
  const size_t outputs = executable->output_dtypes.size();
  if (executable->devices.size() == 1) {
    executable->output_shardings.assign(outputs, Replicated());
    executable->shardings_known = true;
  } else if (!first.output_sharding().empty() || first.has_output_sharding()) {
    OpSharding sharding;
    if (!sharding.ParseFromString(first.output_sharding())) {
      return absl::InternalError("worker sent a malformed output sharding");
    }
    SY_ASSIGN_OR_RETURN(sharding, ToTileForm(sharding));
    executable->output_shardings = SplitOutputSharding(sharding, outputs);
    executable->shardings_known = executable->output_shardings.size() == outputs;
  }
  for (const std::string& bytes : first.parameter_shardings()) {
    OpSharding sharding;
    if (!sharding.ParseFromString(bytes)) {
      return absl::InternalError("worker sent a malformed parameter sharding");
    }
    SY_ASSIGN_OR_RETURN(sharding, ToTileForm(sharding));
    executable->parameter_shardings.push_back(std::move(sharding));
  }
  executable->donated_parameters.assign(first.donated_parameters().begin(),
                                        first.donated_parameters().end());
  executable->cost_analysis.insert(first.cost_analysis().begin(), first.cost_analysis().end());
  executable->compiled_memory_stats = first.compiled_memory_stats();

  return executable;
}

absl::StatusOr<Compiled> Session::CompileOnStandIn(WorkerConnection* down,
                                                   const CompileRequest& compile) {
  absl::StatusOr<CompileResponse> response = CompileForMetadata(down, compile);
  if (absl::IsNotFound(response.status())) return down->CheckEpoch(0);  // its DATA_LOSS
  if (!response.ok()) return response.status();
  SY_LOG(Info) << "session " << policy_.label << ": slice " << down->slice_index()
               << " is down; compiled '" << response->name() << "' elsewhere for now";
  // No epoch of the down worker: compiled there when it is back.
  return Compiled{*std::move(response), 0};
}

absl::StatusOr<CompileResponse> Session::CompileForMetadata(WorkerConnection* host,
                                                            const CompileRequest& compile) {
  // The program's devices on `host`, by local ordinal.
  std::map<int, int64_t> wanted;
  const PluginInfo* plugin = nullptr;
  for (int64_t id : compile.device_ids()) {
    SY_ASSIGN_OR_RETURN(const DeviceEntry* entry, SessionDevice(id));
    wanted[entry->info.local_ordinal()] = id;
    plugin = &entry->plugin;
  }
  if (plugin == nullptr) return absl::InvalidArgumentError("a program on no devices");
  // Another real worker of this session with the same plugin (a simulated host's: the
  // same platform) that has those ordinals.
  std::map<WorkerConnection*, std::map<int, int64_t>> candidates;
  for (const auto& [id, entry] : devices_) {
    if (entry.worker == host || !entry.worker->up() || entry.plugin.simulated() ||
        entry.plugin.platform_name() != plugin->platform_name() ||
        (!plugin->simulated() && entry.plugin.platform_version() != plugin->platform_version()) ||
        entry.plugin.num_nodes() > 1) {
      continue;
    }
    candidates[entry.worker][entry.info.local_ordinal()] = id;
  }
  for (auto& [stand_in, ordinals] : candidates) {
    std::map<int64_t, int64_t> to_stand_in, back;
    for (const auto& [ordinal, id] : wanted) {
      auto it = ordinals.find(ordinal);
      if (it == ordinals.end()) break;
      to_stand_in[id] = it->second;
      back[it->second] = id;
    }
    if (to_stand_in.size() != wanted.size()) continue;
    CompileRequest request = compile;
    switchyard::xla::CompileOptionsProto options;
    if (!options.ParseFromString(compile.compile_options())) {
      return absl::InvalidArgumentError("compile options are not a CompileOptionsProto");
    }
    auto* assignment = options.mutable_executable_build_options()->mutable_device_assignment();
    for (auto& computation : *assignment->mutable_computation_devices()) {
      for (int64_t& id : *computation.mutable_replica_device_ids()) id = to_stand_in.at(id);
    }
    request.set_compile_options(options.SerializeAsString());
    for (int64_t& id : *request.mutable_device_ids()) id = to_stand_in.at(id);
    // Hosts with the same ordinals ask the same: a fleet of simulated hosts compiles a
    // program once.
    request.set_executable_id(0);
    const std::string key = absl::StrCat(stand_in->address(), "\n", request.SerializeAsString());
    std::optional<CompileResponse> known = metadata_.Find(key);
    if (!known.has_value()) {
      request.set_executable_id(NewWorkerObjectId());
      SY_ASSIGN_OR_RETURN(Compiled compiled, Compile(stand_in, request, &calls_));
      DispatchRequest drop;  // only its metadata was wanted
      drop.mutable_delete_executables()->add_executable_ids(request.executable_id());
      stand_in->SendAfter(id_, std::move(drop));
      known = std::move(compiled.response);
      metadata_.Add(key, *known);
    }
    for (int64_t& id : *known->mutable_device_ids()) id = back.at(id);
    return *std::move(known);
  }
  return absl::NotFoundError("no worker of the session can compile the program for it");
}

absl::StatusOr<Compiled> Session::CompileOn(WorkerConnection* worker,
                                            const CompileRequest& request) {
  SY_ASSIGN_OR_RETURN(const DeviceEntry* first,
                      SessionDevice(request.device_ids_size() > 0 ? request.device_ids(0) : -1));
  if (!first->plugin.simulated()) return Compile(worker, request, &calls_);
  // A simulated host compiles the metadata of a real compile of the program.
  absl::StatusOr<CompileResponse> model = CompileForMetadata(worker, request);
  if (absl::IsNotFound(model.status())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "slice ", worker->slice_index(),
        " is a simulated host: its programs are compiled on a "
        "real worker of the session with the same device ordinals, and this session has none "
        "up (start the fleet with a real worker beside the simulated ones: switchyard up "
        "--workers 1 --simulated_hosts N)"));
  }
  if (!model.ok()) return model.status();
  SimulatedProgram program;
  program.name = model->name();
  program.num_replicas = std::max<int64_t>(model->num_replicas(), 1);
  program.num_partitions = std::max<int64_t>(model->num_partitions(), 1);
  for (int64_t id : request.device_ids()) {
    SY_ASSIGN_OR_RETURN(const DeviceEntry* entry, SessionDevice(id));
    program.device_ordinals.push_back(entry->info.local_ordinal());
  }
  for (const OutputSpec& output : model->outputs()) {
    program.outputs.push_back(
        {static_cast<int>(output.dtype()), {output.dims().begin(), output.dims().end()}});
  }
  CompileRequest simulated = request;
  simulated.set_format(kSimulatedProgramFormat);
  simulated.set_program(EncodeSimulatedProgram(program));
  SY_ASSIGN_OR_RETURN(Compiled compiled, Compile(worker, simulated, &calls_));
  // What the client learns is the real compile's; the host says where it runs.
  *model->mutable_device_ids() = compiled.response.device_ids();
  compiled.response = *std::move(model);
  return compiled;
}

absl::Status Session::RefreshPart(const Executable& executable, ExecutablePart* part) {
  absl::Status current = part->worker->CheckEpoch(part->epoch);
  if (current.ok()) return absl::OkStatus();
  if (!part->worker->up()) return current;
  // The worker came back: compile the program there again, for the same devices.
  CompileRequest request = executable.request;
  request.set_executable_id(NewWorkerObjectId());
  absl::StatusOr<Compiled> compiled = CompileOn(part->worker, request);
  if (!compiled.ok()) {
    return absl::Status(
        compiled.status().code(),
        absl::StrCat("compiling '", executable.name, "' again on slice ",
                     part->worker->slice_index(), " host ", part->worker->host_index(),
                     ", which came back: ", compiled.status().message()));
  }
  const std::vector<int64_t> devices(compiled->response.device_ids().begin(),
                                     compiled->response.device_ids().end());
  if (devices != part->devices) {
    return absl::InternalError(absl::StrCat("'", executable.name, "' compiled again on slice ",
                                            part->worker->slice_index(),
                                            " runs on other devices than before"));
  }
  SY_LOG(Info) << "session " << policy_.label << ": compiled '" << executable.name
               << "' again on slice " << part->worker->slice_index() << " host "
               << part->worker->host_index();
  part->worker_id = request.executable_id();
  part->epoch = compiled->epoch;
  return absl::OkStatus();
}

absl::Status Session::HandleExecutableMetadata(const wire::LoadedExecutableMetadataRequest& request,
                                               wire::LoadedExecutableMetadataResponse* response) {
  SY_ASSIGN_OR_RETURN(auto executable, GetExecutable(request.loaded_executable_handle()));
  const size_t outputs = executable->output_dtypes.size();
  if (executable->shardings_known) {
    auto* shardings = response->mutable_output_shardings();
    for (const OpSharding& sharding : executable->output_shardings)
      *shardings->add_shardings() = sharding;
  }
  if (!executable->parameter_shardings.empty()) {
    auto* shardings = response->mutable_parameter_shardings();
    for (const OpSharding& sharding : executable->parameter_shardings) {
      *shardings->add_shardings() = sharding;
    }
  }
  // As the worker's compiler chose them (a client may choose non-default ones).
  auto add_layout = [](const std::vector<int64_t>& order, size_t rank, xla::LayoutProto* layout) {
    const std::vector<int64_t> dense = order.empty() ? MajorToMinor(rank) : order;
    layout->mutable_minor_to_major()->Add(dense.begin(), dense.end());
  };
  // A reshard's or profile's outputs are known only when it runs: the default layouts.
  const bool outputs_unknown = executable->colocated != nullptr ||
                               (executable->plugin != nullptr &&
                                !std::holds_alternative<PersistenceRead>(*executable->plugin) &&
                                !std::holds_alternative<PersistenceWrite>(*executable->plugin));
  if (outputs_unknown) {
    *response->mutable_output_layouts_error() =
        ToStatusProto(absl::UnimplementedError("the outputs have the default layouts"));
  }
  auto* layouts = outputs_unknown ? nullptr : response->mutable_output_layouts_list();
  for (size_t o = 0; layouts != nullptr && o < outputs; ++o) {
    add_layout(o < executable->output_layouts.size() ? executable->output_layouts[o]
                                                     : std::vector<int64_t>(),
               executable->output_shard_dims[o].size(), layouts->add_layouts());
  }
  if (std::any_of(executable->parameter_layouts.begin(), executable->parameter_layouts.end(),
                  [](const auto& order) { return !IsMajorToMinor(order); })) {
    auto* parameters = response->mutable_parameter_layouts_list();
    for (const auto& order : executable->parameter_layouts) {
      parameters->add_layouts()->mutable_minor_to_major()->Add(order.begin(), order.end());
    }
  } else {
    *response->mutable_parameter_layouts_error() =
        ToStatusProto(absl::UnimplementedError("parameter layouts are the defaults"));
  }
  auto* kinds = response->mutable_output_memory_kinds()->add_memory_kind_lists();
  for (size_t o = 0; o < outputs; ++o) kinds->add_memory_kinds("device");
  auto* donated = response->mutable_donated_input_indices();
  for (int index : executable->donated_parameters) donated->add_donated_input_indices(index);
  if (executable->compiled_memory_stats.empty() ||
      !response->mutable_compiled_memory_stats()->ParseFromString(
          executable->compiled_memory_stats)) {
    *response->mutable_compiled_memory_stats_error() = ToStatusProto(
        absl::UnimplementedError("the worker's plugin reports no compiled memory stats"));
  }
  return absl::OkStatus();
}

absl::Status Session::HandleCostAnalysis(const wire::LoadedExecutableCostAnalysisRequest& request,
                                         wire::LoadedExecutableCostAnalysisResponse* response) {
  SY_ASSIGN_OR_RETURN(auto executable, GetExecutable(request.loaded_executable_handle()));
  std::map<std::string, double> costs = executable->cost_analysis;
  if (costs.empty()) {
    absl::StatusOr<const DescribeProgramResponse*> described = Described(*executable);
    if (!described.ok()) {
      *response->mutable_status() = ToStatusProto(described.status());
      return absl::OkStatus();
    }
    costs.insert((*described)->cost_analysis().begin(), (*described)->cost_analysis().end());
  }
  auto* attributes = response->mutable_attributes()->mutable_attributes();
  for (const auto& [name, value] : costs) {
    (*attributes)[name].set_float_value(static_cast<float>(value));
  }
  return absl::OkStatus();
}

absl::Status Session::HandleProgramText(
    const wire::LoadedExecutableHumanReadableProgramTextRequest& request,
    wire::LoadedExecutableHumanReadableProgramTextResponse* response) {
  SY_ASSIGN_OR_RETURN(auto executable, GetExecutable(request.loaded_executable_handle()));
  absl::StatusOr<const DescribeProgramResponse*> described = Described(*executable);
  if (!described.ok()) {
    *response->mutable_status() = ToStatusProto(described.status());
  } else {
    response->set_human_readable_program_text((*described)->text());
  }
  return absl::OkStatus();
}

absl::StatusOr<const DescribeProgramResponse*> Session::Described(Executable& executable) {
  if (!executable.described.has_value()) {
    const ExecutablePart& part = executable.parts.front();
    absl::StatusOr<DescribeProgramResponse> described =
        DescribeProgram(part.worker, part.worker_id, part.epoch);
    if (absl::IsFailedPrecondition(described.status())) {
      // The client reads UNIMPLEMENTED as "not available here".
      described = absl::UnimplementedError(described.status().message());
    }
    // A lost or busy worker may answer next time: only a settled answer is kept.
    if (!described.ok() && !absl::IsUnimplemented(described.status()) &&
        !absl::IsInvalidArgument(described.status())) {
      return described.status();
    }
    executable.described = std::move(described);
  }
  if (!executable.described->ok()) return executable.described->status();
  return &**executable.described;
}

absl::Status Session::HandleExecute(const wire::LoadedExecutableExecuteRequest& request,
                                    wire::LoadedExecutableExecuteResponse* response) {
  SY_ASSIGN_OR_RETURN(auto executable, GetExecutable(request.loaded_executable_handle()));
  if (executable->plugin != nullptr) return ExecutePlugin(*executable, request, response);
  if (executable->colocated != nullptr) return ExecuteColocated(*executable, request, response);
  const size_t outputs = executable->output_dtypes.size();
  if (request.result_array_handle_size() != 0 &&
      static_cast<size_t>(request.result_array_handle_size()) != outputs) {
    return absl::InvalidArgumentError(absl::StrCat("the executable has ", outputs, " outputs; ",
                                                   request.result_array_handle_size(),
                                                   " result handles were given"));
  }
  if (executable->devices.size() > 1 && !executable->shardings_known) {
    return absl::UnimplementedError(
        "the worker's plugin did not report output shardings for this multi-device program");
  }
  std::vector<std::shared_ptr<Array>> args;
  for (int i = 0; i < request.args_handles_size(); ++i) {
    SY_ASSIGN_OR_RETURN(auto array, arrays_.Get(request.args_handles(i)));
    args.push_back(std::move(array));
  }
  // A launch that touches a lost slice (a part's worker is down, an argument is lost)
  // is accepted and its outputs carry the DATA_LOSS: the client learns it where it
  // waits for them, as it would learn a failure on the device. A part whose worker
  // came back is compiled there again.
  LaunchPlan plan;
  for (ExecutablePart& part : executable->parts) {
    absl::Status refreshed = RefreshPart(*executable, &part);
    if (absl::IsDataLoss(refreshed)) {
      if (plan.lost.ok()) plan.lost = refreshed;
    } else if (!refreshed.ok()) {
      return refreshed;
    }
  }
  SY_RETURN_IF_ERROR(PlanLaunch(*executable, args, &plan));
  SY_RETURN_IF_ERROR(SendLaunch(*executable, &plan));
  // Donated arguments are consumed by the launch.
  std::set<int> non_donatable(request.execute_options().non_donatable_input_indices().begin(),
                              request.execute_options().non_donatable_input_indices().end());
  for (int index : executable->donated_parameters) {
    if (index < static_cast<int>(args.size()) && !non_donatable.count(index)) {
      args[index]->deleted = true;
      args[index]->shards.clear();
    }
  }
  SY_RETURN_IF_ERROR(AddOutputs(LaunchOutputs(*executable, plan), request, response));
  if (request.execute_options().fill_status()) {
    // Launch errors surface through the outputs; the status future resolves at once.
    const uint64_t status_handle =
        request.result_status_handle() != 0 ? request.result_status_handle() : NewHandle();
    futures_[status_handle] = plan.lost;
    response->set_status_handle(status_handle);
  }
  return absl::OkStatus();
}

absl::Status Session::PlanLaunch(const Executable& executable,
                                 const std::vector<std::shared_ptr<Array>>& args,
                                 LaunchPlan* plan) {
  absl::Status& lost = plan->lost;
  auto shard_on = [&](size_t arg, int64_t device) -> absl::StatusOr<uint64_t> {
    const auto& list = args[arg]->sharding.devices;
    auto it = std::find(list.begin(), list.end(), device);
    if (it == list.end() || args[arg]->shards[it - list.begin()] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "argument ", arg, " has no shard on device ", device, " where executable '",
          executable.name, "' runs (it lives on devices [", absl::StrJoin(list, ","), "])"));
    }
    const RemoteBuffer& shard = *args[arg]->shards[it - list.begin()];
    if (absl::Status usable = shard.Usable(); !usable.ok() && lost.ok()) {
      // Said once, at the first program that met the loss: a chain of launches after it
      // passes that on as it is (wrapping it again each step made messages as long as
      // the chain).
      if (usable.GetPayload(kLostArgument).has_value()) {
        lost = usable;
      } else {
        lost = absl::DataLossError(
            absl::StrCat("argument ", arg, " of '", executable.name, "' is ", usable.message()));
        lost.SetPayload(kLostArgument, absl::Cord("1"));
      }
    }
    return shard.id();
  };
  // One launch per worker, each with its devices' arguments and fresh output ids;
  // the outputs' shards are in the executable's device order. Everything is checked
  // before the first output id is taken.
  const size_t parts = executable.parts.size();
  plan->launches.resize(parts);
  plan->positions.resize(parts);
  const int32_t launch_id = parts > 1 ? fleet_->NextLaunchId() : 0;
  const double share = policy_.tenant.empty() ? 1.0 : fleet_->TenantShare(policy_.tenant);
  for (size_t p = 0; p < parts; ++p) {
    const ExecutablePart& part = executable.parts[p];
    ExecuteRequest* launch = plan->launches[p].mutable_execute();
    launch->set_executable_id(part.worker_id);
    launch->set_launch_id(launch_id);
    launch->set_session(id_);
    if (!policy_.tenant.empty()) {
      launch->set_tenant(policy_.tenant);
      launch->set_share(share);
    }
    for (int64_t device : part.devices) {
      BufferIdList* arguments = launch->add_arguments();
      for (size_t i = 0; i < args.size(); ++i) {
        SY_ASSIGN_OR_RETURN(uint64_t id, shard_on(i, device));
        arguments->add_ids(id);
      }
      const size_t index = std::find(executable.devices.begin(), executable.devices.end(), device) -
                           executable.devices.begin();
      if (index == executable.devices.size()) {
        return absl::InternalError(absl::StrCat("worker ", part.worker->address(),
                                                " runs the program on device ", device,
                                                ", which its device assignment does not name"));
      }
      plan->positions[p].push_back(index);
    }
  }
  for (size_t p = 0; p < parts; ++p) {
    ExecuteRequest* launch = plan->launches[p].mutable_execute();
    for (size_t d = 0; d < executable.parts[p].devices.size(); ++d) {
      BufferIdList* ids = launch->add_outputs();
      for (size_t o = 0; o < executable.output_dtypes.size(); ++o)
        ids->add_ids(NewWorkerObjectId());
    }
  }
  return absl::OkStatus();
}

absl::Status Session::SendLaunch(const Executable& executable, LaunchPlan* plan) {
  // Sent, not awaited: the worker stores a failed launch's error under its outputs,
  // and whoever reads them gets it. Each worker answers once its part's outputs are
  // computed, so that CheckValueReady is answered here. Deleting the arguments or the
  // executable later goes on the same streams, so after this launch.
  // Within the session's budget of launches in flight: one that floods waits here, on
  // its own request thread, rather than queue without bound ahead of other sessions.
  absl::Status& lost = plan->lost;
  std::vector<DispatchRequest>& launches = plan->launches;
  bool budgeted = false;
  if (lost.ok()) {
    SY_RETURN_IF_ERROR(launches_->Acquire(cancelled_));
    budgeted = true;
  }
  // The budget's place is given back once every part is computed (or lost).
  auto parts_left = std::make_shared<std::atomic<size_t>>(launches.size());
  plan->computed.resize(launches.size());
  std::vector<WorkerConnection::Done> settle(launches.size());
  for (size_t p = 0; p < launches.size(); ++p) {
    plan->computed[p] = std::make_shared<Completion>();
    settle[p] = [completion = plan->computed[p], budget = launches_,
                 parts_left](absl::Status status) {
      if (--*parts_left == 0) budget->Release();
      completion->Settle(std::move(status));
    };
    launches[p].set_answer_when_computed(true);
  }
  if (lost.ok() && launches.size() > 1) {
    const std::optional<GangNumbers> gang = NumberGang(executable, plan);
    std::vector<WorkerConnection::Part> parts;
    for (size_t p = 0; p < launches.size(); ++p) {
      // In the epoch the part and its arguments were checked in.
      parts.push_back({executable.parts[p].worker, launches[p], executable.parts[p].epoch,
                       std::move(settle[p])});
    }
    absl::StatusOr<std::vector<WorkerConnection::Ticket>> sent =
        WorkerConnection::SendTogether(id_, std::move(parts));
    if (sent.ok()) {
      plan->tickets = *std::move(sent);
    } else {
      lost = sent.status();
      // No part went (a host is down): its peers must not wait for these numbers.
      if (gang.has_value()) fleet_->VoidGangs(id_, &*gang);
    }
  } else if (lost.ok()) {
    absl::StatusOr<WorkerConnection::Ticket> sent = executable.parts[0].worker->Send(
        id_, launches[0], std::move(settle[0]), executable.parts[0].epoch);
    if (sent.ok()) {
      plan->tickets.push_back(*sent);
    } else {
      lost = sent.status();
    }
  }
  // Not sent: no part will be answered.
  if (budgeted && !lost.ok()) launches_->Release();
  if (!lost.ok() && !absl::IsDataLoss(lost)) return lost;
  return absl::OkStatus();
}

std::optional<GangNumbers> Session::NumberGang(const Executable& executable, LaunchPlan* plan) {
  std::vector<HostKey> hosts;
  for (const auto& part : executable.parts) {
    if (!part.worker->TakesRmGangs()) return std::nullopt;
    hosts.emplace_back(part.worker->slice_index(), part.worker->host_index());
  }
  absl::StatusOr<GangNumbers> gang = fleet_->NumberGang(id_, hosts);
  if (!gang.ok()) return std::nullopt;  // logged by the fleet
  rm_gangs_ = true;
  for (size_t p = 0; p < plan->launches.size(); ++p) {
    ExecuteRequest* launch = plan->launches[p].mutable_execute();
    launch->set_gang(gang->numbers[p]);
    launch->set_gang_sequencer(gang->sequencer);
    // Unique among every proxy's launches, which may now run on the same hosts.
    launch->set_launch_id(gang->launch_id);
  }
  return *std::move(gang);
}

std::vector<std::shared_ptr<Array>> Session::LaunchOutputs(const Executable& executable,
                                                           const LaunchPlan& plan) {
  const size_t num_devices = executable.devices.size();
  const size_t outputs = executable.output_dtypes.size();
  std::vector<std::shared_ptr<Array>> arrays;
  for (size_t o = 0; o < outputs; ++o) {
    auto array = std::make_shared<Array>();
    array->dtype = executable.output_dtypes[o];
    if (num_devices == 1) {
      array->sharding = SingleDevice(executable.devices[0]);
      array->shape = executable.output_shard_dims[o];
    } else {
      array->sharding.devices = executable.devices;
      array->sharding.op = executable.output_shardings[o];
      array->shape = GlobalShape(array->sharding.op, executable.output_shard_dims[o]);
    }
    array->shards.resize(num_devices);
    arrays.push_back(std::move(array));
  }
  for (size_t p = 0; p < executable.parts.size(); ++p) {
    const ExecutablePart& part = executable.parts[p];
    const ExecuteRequest& launch = plan.launches[p].execute();
    for (size_t d = 0; d < part.devices.size(); ++d) {
      for (size_t o = 0; o < outputs; ++o) {
        arrays[o]->shards[plan.positions[p][d]] =
            plan.lost.ok()
                ? std::make_shared<RemoteBuffer>(part.worker, launch.outputs(d).ids(o),
                                                 part.devices[d], plan.tickets[p], plan.computed[p])
                : RemoteBuffer::Lost(part.worker, part.devices[d], plan.lost);
      }
    }
  }
  return arrays;
}

absl::Status Session::HandleExecutableDestruct(
    const wire::LoadedExecutableDestructRequest& request) {
  std::shared_ptr<Executable> gone;  // freed outside the lock: it sends to its workers
  {
    absl::MutexLock lock(&executables_mutex_);
    auto it = executables_.find(request.loaded_executable_handle());
    if (it != executables_.end()) {
      gone = std::move(it->second);
      executables_.erase(it);
    }
  }
  if (gone == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("Unknown loaded executable handle: ", request.loaded_executable_handle()));
  }
  return absl::OkStatus();
}

absl::Status Session::HandleFetchExecuteResult(
    const wire::LoadedExecutableFetchExecuteResultRequest& request) {
  wire::CheckFutureRequest check;
  check.set_future_handle(request.result_status_handle());
  return HandleCheckFuture(check);
}

absl::Status Session::HandleGetDefaultDeviceAssignment(
    const wire::GetDefaultDeviceAssignmentRequest& request,
    wire::GetDefaultDeviceAssignmentResponse* response) {
  const int64_t replicas = request.num_replicas();
  const int64_t partitions = request.num_partitions();
  absl::StatusOr<int64_t> wanted =
      CheckedProduct(replicas, partitions, limits::kDevicesMax, "replicas x partitions");
  if (!wanted.ok() || replicas == 0 || partitions == 0 ||
      *wanted > static_cast<int64_t>(devices_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("cannot assign ", replicas, " replicas x ",
                                                   partitions, " partitions to ", devices_.size(),
                                                   " devices"));
  }
  std::vector<int64_t> ids;
  for (const auto& [id, entry] : devices_) ids.push_back(id);
  auto* assignment = response->mutable_device_assignment();
  assignment->set_replica_count(static_cast<int32_t>(replicas));
  assignment->set_computation_count(static_cast<int32_t>(partitions));
  for (int64_t p = 0; p < partitions; ++p) {
    auto* computation = assignment->add_computation_devices();
    for (int64_t r = 0; r < replicas; ++r)
      computation->add_replica_device_ids(ids[r * partitions + p]);
  }
  return absl::OkStatus();
}

}  // namespace switchyard::proxy
