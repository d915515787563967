#include "worker/executor.h"

#include <limits>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/dimension_order.h"
#include "common/guarded.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/tenant_name.h"
#include "common/trace.h"
#include "common/wire_numbers.h"
#include "pjrt/buffer.h"
#include "worker/embedded_jaxlib.h"
#include "xla/compile_options.pb.h"
#include "xla/hlo_module.pb.h"
#include "xla/xla_data.pb.h"

namespace switchyard::worker {
namespace {

// The compile option under which switchyard.initialize() names its host-callback key.
constexpr char kHostCallbackOption[] = "switchyard_host_callbacks";

}  // namespace

absl::StatusOr<std::string> Executor::LocalCompileOptions(const CompileRequest& request,
                                                          std::string* callback_key) const {
  xla::CompileOptionsProto options;
  if (!options.ParseFromString(request.compile_options())) {
    return absl::InvalidArgumentError("compile_options is not a serialized CompileOptionsProto");
  }
  // Ours, not the plugin's (it refuses options it does not know).
  auto overrides = options.mutable_env_option_overrides();
  if (auto it = overrides->find(kHostCallbackOption); it != overrides->end()) {
    *callback_key = it->second.string_field();
    overrides->erase(it);
    if (callback_key->empty() || callback_key->size() > 256) {
      return absl::InvalidArgumentError(
          absl::StrCat(kHostCallbackOption, " must be a string of 1 to 256 bytes"));
    }
    if (callbacks_ == nullptr) {
      return absl::UnimplementedError(absl::StrCat(
          "the program calls host callbacks (jax.debug.print, pure_callback, io_callback), "
          "which this worker cannot serve: they need a CPU worker whose PJRT plugin has the "
          "FFI extension"));
    }
  }
  auto* build = options.mutable_executable_build_options();
  if (build->num_replicas() <= 0) build->set_num_replicas(1);
  if (build->num_partitions() <= 0) build->set_num_partitions(1);
  // The plugin CHECK-fails (aborts the worker) on a negative ordinal: refuse it here.
  if (build->device_ordinal() < -1 || build->device_ordinal() >= devices_->size()) {
    return absl::InvalidArgumentError(absl::StrCat("device_ordinal ", build->device_ordinal(),
                                                   " is not -1 or one of this worker's ",
                                                   devices_->size(), " devices"));
  }
  if (build->process_index() < 0 || build->process_count() < 0) {
    return absl::InvalidArgumentError("process_index and process_count must not be negative");
  }
  // Our own devices first; a multi-host program also names the other hosts' devices,
  // whose plugin ids the caller passes along.
  auto to_plugin_id = [&](int64_t global_id) -> absl::StatusOr<int64_t> {
    auto ordinal = devices_->OrdinalOf(global_id);
    if (ordinal.ok()) return devices_->PluginIdOf(*ordinal);
    auto peer = request.peer_plugin_ids().find(global_id);
    if (peer != request.peer_plugin_ids().end()) return peer->second;
    return ordinal.status();
  };

  if (build->has_device_assignment()) {
    for (auto& computation : *build->mutable_device_assignment()->mutable_computation_devices()) {
      for (int64_t& id : *computation.mutable_replica_device_ids()) {
        auto local = to_plugin_id(id);
        if (!local.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("the program's device assignment names device ", id,
                           ", which is not on this worker: ", local.status().message()));
        }
        id = *local;
      }
    }
    return options.SerializeAsString();
  }

  std::vector<int64_t> device_ids(request.device_ids().begin(), request.device_ids().end());
  if (device_ids.empty()) {
    SY_ASSIGN_OR_RETURN(int64_t first, devices_->GlobalIdOf(0));
    device_ids.push_back(first);
  }
  const int64_t replicas = build->num_replicas();
  const int64_t partitions = build->num_partitions();
  SY_ASSIGN_OR_RETURN(
      const int64_t wanted,
      CheckedProduct(replicas, partitions, limits::kDevicesMax, "replicas x partitions"));
  if (wanted != static_cast<int64_t>(device_ids.size())) {
    return absl::InvalidArgumentError(absl::StrCat("the program has ", replicas, " replicas x ",
                                                   partitions, " partitions but the request names ",
                                                   device_ids.size(), " devices"));
  }
  auto* assignment = build->mutable_device_assignment();
  assignment->set_replica_count(replicas);
  assignment->set_computation_count(partitions);
  for (int64_t p = 0; p < partitions; ++p) {
    auto* computation = assignment->add_computation_devices();
    for (int64_t r = 0; r < replicas; ++r) {
      auto local = to_plugin_id(device_ids[r * partitions + p]);
      if (!local.ok()) return absl::InvalidArgumentError(local.status().message());
      computation->add_replica_device_ids(*local);
    }
  }
  return options.SerializeAsString();
}

absl::StatusOr<std::unique_ptr<pjrt::Executable>> Executor::CompileOrLoad(
    const std::string& program, const std::string& format, const std::string& options) {
  std::optional<compile_cache::Key> key;
  if (cache_ != nullptr) {
    absl::StatusOr<compile_cache::Key> made =
        compile_cache::MakeKey(format, program, options, plugin_, "");
    if (made.ok()) key = *std::move(made);
  }
  if (key.has_value()) {
    const absl::Time started = absl::Now();
    if (std::optional<compile_cache::Hit> hit = cache_->Lookup(*key); hit.has_value()) {
      auto loaded = client_->Deserialize(hit->executable);
      if (loaded.ok()) {
        const double seconds = absl::ToDoubleSeconds(absl::Now() - started);
        cache_->AddLoadSeconds(seconds, hit->compile_seconds);
        SY_LOG(Info) << "compilation cache hit for " << (*loaded)->name() << ": loaded in "
                     << absl::StrFormat("%.3f", seconds) << " s (compiling it took "
                     << absl::StrFormat("%.3f", hit->compile_seconds) << " s)";
        return loaded;
      }
      cache_->Reject(*key, loaded.status().message());
    }
  }
  const absl::Time started = absl::Now();
  auto compiled = client_->Compile(program, format, options);
  if (!compiled.ok() || !key.has_value()) return compiled;
  const double seconds = absl::ToDoubleSeconds(absl::Now() - started);
  if (cache_->writable()) {
    absl::StatusOr<std::string> serialized = (*compiled)->Serialize();
    if (serialized.ok()) {
      key->program_name = (*compiled)->name();
      cache_->Store(*key, *serialized, seconds);
    } else {
      SY_LOG(Warning) << "compilation cache: the plugin cannot serialize " << (*compiled)->name()
                      << ": " << serialized.status().message();
    }
  }
  return compiled;
}

absl::StatusOr<CompileResponse> Executor::Compile(const CompileRequest& request, uint64_t owner) {
  if (request.executable_id() == 0) {
    return absl::InvalidArgumentError("executable id 0 is reserved");
  }
  {
    absl::MutexLock lock(&mutex_);
    if (executables_.contains(request.executable_id())) {
      return absl::AlreadyExistsError(
          absl::StrCat("executable ", request.executable_id(), " already exists"));
    }
  }
  std::string callback_key;
  SY_ASSIGN_OR_RETURN(std::string options, LocalCompileOptions(request, &callback_key));
  const std::string format = request.format().empty() ? "mlir" : request.format();
  auto compiled = CompileOrLoad(request.program(), format, options);
  ++compilations_;
  if (!compiled.ok()) {
    // The plugin's code (often INTERNAL or UNKNOWN) says little; the program is at fault,
    // or this worker's setup, when a kernel the program calls was never registered.
    const absl::string_view message = compiled.status().message();
    const bool missing_kernel = absl::StrContains(message, "No FFI handler registered") ||
                                absl::StrContains(message, "custom call target");
    return absl::InvalidArgumentError(
        absl::StrCat("the PJRT plugin could not compile the program: ", message,
                     missing_kernel && !missing_kernels_hint_.empty() ? "; " : "",
                     missing_kernel ? missing_kernels_hint_ : ""));
  }
  std::shared_ptr<const pjrt::Executable> executable = std::move(compiled).value();

  CompileResponse response;
  response.set_name(executable->name());
  response.set_num_replicas(executable->num_replicas());
  response.set_num_partitions(executable->num_partitions());
  for (int ordinal : executable->device_ordinals()) {
    SY_ASSIGN_OR_RETURN(int64_t global_id, devices_->GlobalIdOf(ordinal));
    response.add_device_ids(global_id);
  }
  for (const pjrt::OutputSpec& spec : executable->outputs()) {
    OutputSpec* out = response.add_outputs();
    out->set_dtype(static_cast<DType>(spec.dtype));
    out->mutable_dims()->Add(spec.dims.begin(), spec.dims.end());
  }
  if (auto costs = executable->CostAnalysis(); costs.ok()) {
    for (auto& [name, value] : *costs) (*response.mutable_cost_analysis())[name] = value;
  }
  if (auto stats = executable->MemoryStats(); stats.ok()) {
    xla::CompiledMemoryStatsProto proto;
    proto.set_generated_code_size_in_bytes(stats->generated_code);
    proto.set_argument_size_in_bytes(stats->arguments);
    proto.set_output_size_in_bytes(stats->outputs);
    proto.set_alias_size_in_bytes(stats->alias);
    proto.set_temp_size_in_bytes(stats->temp);
    proto.set_host_generated_code_size_in_bytes(stats->host_generated_code);
    proto.set_host_argument_size_in_bytes(stats->host_arguments);
    proto.set_host_output_size_in_bytes(stats->host_outputs);
    proto.set_host_alias_size_in_bytes(stats->host_alias);
    proto.set_host_temp_size_in_bytes(stats->host_temp);
    proto.set_peak_memory_in_bytes(stats->peak);
    response.set_compiled_memory_stats(proto.SerializeAsString());
  }
  // Shardings, aliasing and layouts come from the optimized module; a plugin without
  // it leaves them empty and callers fall back to what they know.
  std::vector<std::vector<int64_t>> parameter_layouts;
  if (auto optimized = executable->OptimizedProgram(); optimized.ok()) {
    xla::HloModuleProtoWithConfig module;
    if (module.ParseFromString(*optimized)) {
      const xla::HloModuleProto& hlo = module.hlo_module();
      const xla::ProgramShapeProto& signature = hlo.host_program_shape();
      for (const xla::ShapeProto& parameter : signature.parameters()) {
        const auto& order = parameter.layout().minor_to_major();
        parameter_layouts.emplace_back(order.begin(), order.end());
        response.add_parameter_layouts()->mutable_minor_to_major()->Add(order.begin(), order.end());
      }
      // Several outputs come as a tuple; one may come bare.
      const xla::ShapeProto& result = signature.result();
      const bool tuple = result.tuple_shapes_size() > 0;
      const int results = tuple ? result.tuple_shapes_size() : 1;
      if (results == response.outputs_size() &&
          (tuple || result.dimensions_size() > 0 || result.has_layout())) {
        for (int o = 0; o < results; ++o) {
          const auto& order = (tuple ? result.tuple_shapes(o) : result).layout().minor_to_major();
          if (!IsMajorToMinor(absl::MakeConstSpan(order.data(), order.size()))) {
            response.mutable_outputs(o)->mutable_minor_to_major()->Add(order.begin(), order.end());
          }
        }
      }
      if (hlo.has_spmd_output_sharding()) {
        // A replicated sharding serializes to no bytes (jax 0.10's shard_map with
        // out_specs=P()): say that it is there.
        response.set_output_sharding(hlo.spmd_output_sharding().SerializeAsString());
        response.set_has_output_sharding(true);
      }
      for (const xla::OpSharding& sharding : hlo.spmd_parameters_shardings()) {
        response.add_parameter_shardings(sharding.SerializeAsString());
      }
      for (const auto& entry : hlo.input_output_alias().entries()) {
        response.add_donated_parameters(static_cast<int32_t>(entry.parameter_number()));
      }
    }
  }
  absl::MutexLock lock(&mutex_);
  auto [it, inserted] = executables_.try_emplace(
      request.executable_id(),
      Loaded{std::move(executable), owner, std::move(callback_key), std::move(parameter_layouts)});
  if (!inserted) {
    return absl::AlreadyExistsError(
        absl::StrCat("executable ", request.executable_id(), " already exists"));
  }
  return response;
}

absl::Status Executor::Execute(const ExecuteRequest& request, uint64_t owner,
                               std::shared_ptr<HostCallbacks::Stream> stream,
                               const std::function<bool()>& cancelled) {
  // The RM's numbering orders every proxy's launches; a proxy's own, only its.
  const uint64_t numbering = request.gang_sequencer() != 0 ? request.gang_sequencer() : owner;
  absl::Status status = AwaitGangTurn(numbering, request, cancelled);
  if (status.ok()) {
    status = Guarded("Execute", [&] { return Launch(request, owner, std::move(stream)); });
  }
  if (request.gang() != 0) {
    // Handed over or failed: the numbering's next multi-host launch may go.
    absl::MutexLock lock(&gate_->mutex);
    if (absl::IsDeadlineExceeded(status)) {
      gate_->gangs.PassThrough(numbering, request.gang());
    } else {
      gate_->gangs.Passed(numbering, request.gang());
    }
  }
  if (!status.ok()) {
    // Whoever waits for the outputs learns why they will not come.
    for (const BufferIdList& list : request.outputs()) {
      for (uint64_t id : list.ids()) {
        if (!buffers_->Contains(id)) buffers_->AddError(id, status, owner);
      }
    }
  }
  return status;
}

std::pair<uint64_t, uint64_t> Executor::GangPassed() const {
  absl::MutexLock lock(&gate_->mutex);
  const uint64_t sequencer = gate_->latest_sequencer;
  if (sequencer == 0) return {0, 0};
  return {sequencer, gate_->gangs.Next(sequencer) - 1};
}

void Executor::StartGangs(uint64_t sequencer, uint64_t first) {
  absl::MutexLock lock(&gate_->mutex);
  gate_->latest_sequencer = sequencer;
  if (first > 1) gate_->gangs.PassThrough(sequencer, first - 1);
}

absl::Status Executor::AwaitGangTurn(uint64_t numbering, const ExecuteRequest& request,
                                     const std::function<bool()>& cancelled) {
  const uint64_t gang = request.gang();
  if (gang == 0) return absl::OkStatus();
  const uint64_t sequencer = request.gang_sequencer();
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + absl::Milliseconds(limits::kGangTurnMs);
  absl::Time ask_at = start + absl::Milliseconds(limits::kGangGapAskMs);
  const bool asks = sequencer != 0 && gang_voids_ != nullptr;
  while (true) {
    {
      absl::MutexLock lock(&gate_->mutex);
      // A new RM process numbers from 1 again: the old numbering's waits are its own.
      if (sequencer != 0) gate_->latest_sequencer = sequencer;
      auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(gate_->mutex) {
        return gate_->gangs.MayGo(numbering, gang) || gate_->gangs.Late(numbering, gang);
      };
      while (!gate_->mutex.AwaitWithTimeout(absl::Condition(&settled), absl::Milliseconds(100))) {
        if (cancelled != nullptr && cancelled()) {
          return absl::CancelledError("the operation stream that carried the launch ended");
        }
        const absl::Time now = absl::Now();
        if (now >= deadline) {
          // Passed all the same (by the caller), so that the numbering's later launches go.
          return absl::DeadlineExceededError(absl::StrCat(
              "multi-host launch ", gang, " waited ", limits::kGangTurnMs / 1000, " s for launch ",
              gate_->gangs.Next(numbering), ", which must start first on every host"));
        }
        if (asks && now >= ask_at) break;
      }
      if (settled()) {
        if (!gate_->gangs.Late(numbering, gang)) return absl::OkStatus();
        return absl::FailedPreconditionError(absl::StrCat(
            "multi-host launch ", gang,
            " came after its turn: its session or proxy ended, or "
            "the launches after it gave up waiting for it, so it cannot start in the same "
            "order on every host"));
      }
    }
    PassGangVoids(sequencer, gang);  // not under the lock: it asks the RM
    ask_at = absl::Now() + absl::Milliseconds(limits::kGangGapAskMs);
  }
}

void Executor::PassGangVoids(uint64_t sequencer, uint64_t gang) {
  uint64_t first;
  {
    absl::MutexLock lock(&gate_->mutex);
    first = gate_->gangs.Next(sequencer);
  }
  if (first >= gang) return;
  const uint64_t last = std::min(gang - 1, first + limits::kGangVoidsQueryMax - 1);
  absl::StatusOr<std::vector<uint64_t>> voids = gang_voids_(sequencer, first, last);
  if (!voids.ok()) {
    SY_LOG(Warning) << "cannot ask the resource manager about gang numbers " << first << ".."
                    << last << " (launch " << gang << " waits for them): " << voids.status();
    return;
  }
  absl::MutexLock lock(&gate_->mutex);
  for (uint64_t number : *voids) {
    if (number >= first && number <= last) gate_->gangs.Passed(sequencer, number);
  }
}

absl::StatusOr<std::unique_ptr<pjrt::Buffer>> Executor::Relayout(
    const pjrt::Buffer& buffer, absl::Span<const int64_t> minor_to_major) const {
  // Through the host: rare (a client that chose layouts for a program's inputs or
  // outputs), and the plugin offers no on-device relayout.
  SY_ASSIGN_OR_RETURN(std::unique_ptr<HostBytes> bytes, buffer.ToHost());
  return client_->BufferFromHost(bytes->span(), buffer.dtype(), buffer.dims(),
                                 buffer.device_ordinal(), buffer.memory_kind(), minor_to_major);
}

namespace {

// Whether a buffer of dimension order `has` can go where `wants` is read. Empty is the
// default order (a plugin that does not say has only that one).
bool SameOrder(const std::vector<int64_t>& has, const std::vector<int64_t>& wants, size_t rank) {
  const bool has_default = has.empty() || IsMajorToMinor(has);
  const bool wants_default = wants.empty() || IsMajorToMinor(wants);
  if (has_default || wants_default) return has_default == wants_default;
  return has == wants && has.size() == rank;
}

}  // namespace

absl::StatusOr<Executor::LaunchArguments> Executor::GatherArguments(
    const ExecuteRequest& request, const pjrt::Executable& executable,
    const std::vector<std::vector<int64_t>>& parameter_layouts) const {
  const size_t num_devices = executable.device_ordinals().size();
  const size_t num_outputs = executable.outputs().size();
  if (static_cast<size_t>(request.arguments_size()) != num_devices ||
      static_cast<size_t>(request.outputs_size()) != num_devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("executable ", request.executable_id(), " runs on ", num_devices,
                     " devices; the request has ", request.arguments_size(), " argument lists and ",
                     request.outputs_size(), " output lists"));
  }
  LaunchArguments arguments;
  arguments.per_device.resize(num_devices);
  for (size_t d = 0; d < num_devices; ++d) {
    if (static_cast<size_t>(request.outputs(d).ids_size()) != num_outputs) {
      return absl::InvalidArgumentError(absl::StrCat("the executable has ", num_outputs,
                                                     " outputs per device; the request names ",
                                                     request.outputs(d).ids_size()));
    }
    for (uint64_t id : request.outputs(d).ids()) {
      if (id == 0 || buffers_->Contains(id)) {
        return absl::InvalidArgumentError(absl::StrCat("output buffer id ", id, " is in use"));
      }
    }
    for (int i = 0; i < request.arguments(d).ids_size(); ++i) {
      SY_ASSIGN_OR_RETURN(std::shared_ptr<const StoredBuffer> stored,
                          buffers_->Get(request.arguments(d).ids(i)));
      const pjrt::Buffer& buffer = *stored->buffer;
      // The plugin neither checks nor converts layouts: it would read the bytes as if
      // they were in the order the program wants.
      const std::vector<int64_t> none;
      const std::vector<int64_t>& wants =
          static_cast<size_t>(i) < parameter_layouts.size() ? parameter_layouts[i] : none;
      if (!SameOrder(buffer.minor_to_major(), wants, buffer.dims().size())) {
        SY_ASSIGN_OR_RETURN(std::unique_ptr<pjrt::Buffer> copy, Relayout(buffer, wants));
        arguments.per_device[d].push_back(copy.get());
        arguments.relaid.push_back(std::move(copy));
      } else {
        arguments.per_device[d].push_back(stored->buffer.get());
      }
      arguments.held.push_back(std::move(stored));
    }
  }
  return arguments;
}

absl::StatusOr<BufferStore::Reservation> Executor::ReserveOutputs(
    const ExecuteRequest& request, const pjrt::Executable& executable) const {
  // Claimed before the launch, so that one past the worker's bound fails here, naming
  // it, instead of the host running out (counted whole even where an output reuses a
  // donated input's memory).
  int64_t output_bytes = 0;
  for (const pjrt::OutputSpec& spec : executable.outputs()) {
    SY_ASSIGN_OR_RETURN(int64_t elements, CheckedElements(spec.dims, "an output"));
    output_bytes += pjrt::DenseByteSize(spec.dtype, elements);  // each under 2^62: no overflow
  }
  SY_ASSIGN_OR_RETURN(
      output_bytes,
      CheckedProduct(output_bytes, static_cast<int64_t>(executable.device_ordinals().size()),
                     std::numeric_limits<int64_t>::max() / 4, "the outputs' bytes"));
  return buffers_->Reserve(output_bytes, [&] {
    return absl::StrCat("the outputs of executable ", request.executable_id());
  });
}

uint64_t Executor::AwaitLaunchTurn(const ExecuteRequest& request, uint64_t owner,
                                   const pjrt::Executable& executable, bool in_order) {
  FairShare::Request fair;
  fair.flow = !request.tenant().empty() ? absl::StrCat("tenant ", request.tenant())
              : request.session() != 0  ? absl::StrCat("session ", request.session())
                                        : absl::StrCat("owner ", owner);
  fair.account = request.tenant();
  fair.share = request.share();
  fair.program = request.executable_id();
  fair.devices.assign(executable.device_ordinals().begin(), executable.device_ordinals().end());
  fair.in_order = in_order;
  Gate& gate = *gate_;
  absl::MutexLock lock(&gate.mutex);
  const uint64_t ticket =
      gate.launches.Arrive(std::move(fair), executable.device_ordinals().size() > 1);
  auto turn = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(gate.mutex) {
    return gate.launches.MayStart(ticket, absl::Now());
  };
  gate.mutex.Await(absl::Condition(&turn));
  gate.launches.Start(ticket, absl::Now());
  return ticket;
}

void Executor::WatchInputs(const std::shared_ptr<FinishOnce>& finish,
                           const LaunchArguments& arguments) {
  // Asked only while flows compete: it costs an event per input. An input ready already
  // answers at once, on this thread: it changes nothing. An earlier launch's output is
  // not watched: the device's order covers it, and a callback that runs late (a loaded
  // host) would take the launch's own compute time for waiting.
  std::weak_ptr<FinishOnce> weak = finish;
  const std::thread::id here = std::this_thread::get_id();
  for (const auto& stored : arguments.held) {
    if (stored->launched) continue;
    stored->buffer->OnReady([weak, here](absl::Status) {
      if (std::this_thread::get_id() == here) return;
      const int64_t now = absl::GetCurrentTimeNanos();
      std::shared_ptr<FinishOnce> finishing = weak.lock();
      if (finishing == nullptr) return;
      int64_t seen = finishing->inputs_ready_ns.load();
      while (seen < now && !finishing->inputs_ready_ns.compare_exchange_weak(seen, now)) {
      }
    });
  }
}

absl::Status Executor::StoreOutputs(const ExecuteRequest& request,
                                    const pjrt::Executable& executable, uint64_t owner,
                                    pjrt::Launch& launch) {
  absl::Status status;
  for (size_t d = 0; d < executable.device_ordinals().size(); ++d) {
    absl::StatusOr<int64_t> device_id = devices_->GlobalIdOf(executable.device_ordinals()[d]);
    for (size_t o = 0; o < executable.outputs().size(); ++o) {
      absl::Status added = device_id.status();
      if (added.ok()) {
        added = buffers_->Add(request.outputs(d).ids(o), *device_id,
                              std::move(launch.outputs[d][o]), owner, /*launched=*/true);
      }
      if (status.ok()) status = added;
    }
  }
  return status;
}

absl::Status Executor::Launch(const ExecuteRequest& request, uint64_t owner,
                              std::shared_ptr<HostCallbacks::Stream> stream) {
  const absl::Time arrived = trace::Active() ? absl::Now() : absl::InfinitePast();
  std::shared_ptr<const pjrt::Executable> executable;
  std::string callback_key;
  std::vector<std::vector<int64_t>> parameter_layouts;
  {
    absl::MutexLock lock(&mutex_);
    auto it = executables_.find(request.executable_id());
    if (it == executables_.end()) {
      return absl::NotFoundError(absl::StrCat("unknown executable ", request.executable_id()));
    }
    executable = it->second.executable;
    callback_key = it->second.callback_key;
    parameter_layouts = it->second.parameter_layouts;
  }
  if (!request.tenant().empty() && !IsTenantName(request.tenant())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a tenant name is up to ", limits::kTenantNameMax, " letters, digits, '-', '_' or '.'"));
  }
  std::shared_ptr<pjrt::ExecuteContext> context;
  if (!callback_key.empty()) {
    if (stream == nullptr) {
      return absl::FailedPreconditionError(
          "a program with host callbacks runs only when launched through a Dispatch stream");
    }
    SY_ASSIGN_OR_RETURN(context, callbacks_->ContextFor(callback_key, std::move(stream)));
  }
  // Inputs are held for the duration of the launch call.
  SY_ASSIGN_OR_RETURN(LaunchArguments arguments,
                      GatherArguments(request, *executable, parameter_layouts));
  SY_ASSIGN_OR_RETURN(BufferStore::Reservation memory, ReserveOutputs(request, *executable));
  // Never reordered nor held back for others: a multi-host part may wait in a
  // collective for its peers, which every host must start in the same order, and a
  // launch with host callbacks may wait on the client.
  const bool multi_host = request.launch_id() != 0;
  Gate& gate = *gate_;
  const uint64_t ticket =
      AwaitLaunchTurn(request, owner, *executable, multi_host || context != nullptr);
  bool handed_over = false;
  absl::Cleanup abandoned = [&] {
    if (handed_over) return;
    absl::MutexLock lock(&gate.mutex);
    gate.launches.Abandon(ticket);
  };
  // Frees the launch's place and charges it once nothing refers to it: after the
  // handover, when the last device part is done and this call has returned (also by an
  // exception), so that no path leaves the gate waiting for it.
  auto finish = std::make_shared<FinishOnce>();
  finish->gate = gate_;
  finish->ticket = ticket;
  finish->executable = executable;
  finish->tenant = request.tenant();
  {
    // Checked last: the launch may have waited for its turn meanwhile.
    absl::MutexLock lock(&mutex_);
    if (request.session() != 0 && cancelled_.contains(OwnedSession{owner, request.session()})) {
      return absl::CancelledError("the session that launched it has ended");
    }
  }
  auto launch = executable->Execute(arguments.per_device, request.launch_id(), context.get());
  if (!launch.ok()) {
    return absl::Status(launch.status().code(),
                        absl::StrCat("launch of executable ", request.executable_id(),
                                     " failed: ", launch.status().message()));
  }
  ++executions_;
  if (trace::Active()) {
    finish->handed_over = absl::Now();
    absl::StatusOr<int64_t> first = devices_->GlobalIdOf(executable->device_ordinals()[0]);
    finish->lane = trace::DeviceLane(first.ok() ? *first : -1);
    finish->session = request.session();
    trace::Record(absl::StrCat("wait: ", executable->name()), "queue", arrived, finish->handed_over,
                  trace::ThisThreadLane(), request.session());
  }
  bool competing = false;
  {
    absl::MutexLock lock(&gate.mutex);
    handed_over = true;
    finish->armed = true;
    gate.launches.HandedOver(ticket);
    competing = gate.launches.fair().Competing(absl::Now()) > 1;
  }
  // While flows compete, a launch is charged from when its inputs are computed, not for
  // waiting on them (a transfer still arriving).
  if (competing) WatchInputs(finish, arguments);
  // Done once every device's part is; the context lives until then (custom calls use it).
  struct Pending {
    std::atomic<size_t> left;
    std::shared_ptr<pjrt::ExecuteContext> context;
    std::shared_ptr<FinishOnce> finish;
  };
  std::vector<std::unique_ptr<pjrt::Event>> awaited;
  if (request.wait()) {
    awaited = std::move(launch->completions);
  } else if (!launch->completions.empty()) {
    auto pending = std::make_shared<Pending>();
    pending->left = launch->completions.size();
    pending->context = context;
    pending->finish = finish;
    for (auto& completion : launch->completions) {
      pjrt::Event::Then(std::move(completion), [pending](absl::Status) {
        if (--pending->left > 0) return;
        pending->context.reset();
        pending->finish.reset();
      });
    }
  }
  absl::Status status = StoreOutputs(request, *executable, owner, *launch);
  for (auto& completion : awaited) {
    absl::Status done = completion->Await();
    if (status.ok()) status = done;
  }
  return status;
}

Executor::FinishOnce::~FinishOnce() {
  if (!armed) return;
  absl::Time now;
  {
    absl::MutexLock lock(&gate->mutex);
    // Read under the lock: of launches ending on two threads at once, the later seen is
    // charged from the earlier's end, never nothing.
    now = absl::Now();
    RecentLaunch recent;
    const int64_t ready = inputs_ready_ns.load();
    recent.set_device_seconds(gate->launches.Finish(
        ticket, now, ready == 0 ? absl::InfinitePast() : absl::FromUnixNanos(ready)));
    recent.set_program(executable->name());
    recent.set_tenant(tenant);
    recent.set_finished_unix_ms(absl::ToUnixMillis(now));
    gate->recent.push_front(std::move(recent));
    if (gate->recent.size() > static_cast<size_t>(limits::kRecentLaunchesKept)) {
      gate->recent.pop_back();
    }
  }
  trace::Record(executable->name(), "launch", handed_over, now, lane, session);
}

void Executor::AddStats(WorkerStats* stats) const {
  absl::MutexLock lock(&gate_->mutex);
  for (const auto& [tenant, seconds] : gate_->launches.fair().served()) {
    (*stats->mutable_device_seconds())[tenant] = seconds;
  }
  for (const auto& [ordinal, seconds] : gate_->launches.fair().busy()) {
    auto global = devices_->GlobalIdOf(ordinal);
    if (global.ok()) (*stats->mutable_device_busy_seconds())[*global] = seconds;
  }
  for (const RecentLaunch& recent : gate_->recent) *stats->add_recent_launches() = recent;
}

absl::StatusOr<DescribeProgramResponse> Executor::Describe(uint64_t executable_id) const {
  std::shared_ptr<const pjrt::Executable> executable;
  {
    absl::MutexLock lock(&mutex_);
    auto it = executables_.find(executable_id);
    if (it == executables_.end()) {
      return absl::NotFoundError(absl::StrCat("unknown executable ", executable_id));
    }
    executable = it->second.executable;
  }
  SY_ASSIGN_OR_RETURN(std::string optimized, executable->OptimizedProgram());
  xla::HloModuleProtoWithConfig module;
  if (!module.ParseFromString(optimized)) {
    return absl::InternalError("the plugin's optimized program does not parse");
  }
  SY_ASSIGN_OR_RETURN(ProgramReport report,
                      DescribeProgram(module.hlo_module().SerializeAsString()));
  DescribeProgramResponse response;
  response.set_text(std::move(report.text));
  auto plugin_costs = executable->CostAnalysis();
  auto& costs = plugin_costs.ok() ? *plugin_costs : report.costs;
  for (auto& [name, value] : costs) (*response.mutable_cost_analysis())[name] = value;
  return response;
}

std::vector<uint64_t> Executor::Delete(const std::vector<uint64_t>& ids) {
  std::vector<uint64_t> not_found;
  absl::MutexLock lock(&mutex_);
  for (uint64_t id : ids) {
    if (executables_.erase(id) == 0) not_found.push_back(id);
  }
  absl::MutexLock gate(&gate_->mutex);
  for (uint64_t id : ids) gate_->launches.Forget(id);
  return not_found;
}

void Executor::CancelSession(uint64_t owner, uint64_t session) {
  if (session == 0) return;
  absl::MutexLock lock(&mutex_);
  if (!cancelled_.insert({owner, session}).second) return;
  cancelled_order_.push_back({owner, session});
  if (cancelled_order_.size() > static_cast<size_t>(limits::kCancelledSessionsKept)) {
    cancelled_.erase(cancelled_order_.front());
    cancelled_order_.pop_front();
  }
}

int64_t Executor::DeleteOwned(uint64_t owner) {
  if (owner == 0) return 0;
  std::vector<std::shared_ptr<const pjrt::Executable>> doomed;  // freed outside the lock
  absl::MutexLock lock(&mutex_);
  for (auto it = executables_.begin(); it != executables_.end();) {
    if (it->second.owner == owner) {
      {
        absl::MutexLock gate(&gate_->mutex);
        gate_->launches.Forget(it->first);
      }
      doomed.push_back(std::move(it->second.executable));
      executables_.erase(it++);
    } else {
      ++it;
    }
  }
  {
    absl::MutexLock gate(&gate_->mutex);
    gate_->gangs.Forget(owner);
  }
  return doomed.size();
}

int64_t Executor::size() const {
  absl::MutexLock lock(&mutex_);
  return executables_.size();
}

}  // namespace switchyard::worker
