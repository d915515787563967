#include "pjrt/executable.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "pjrt/buffer.h"
#include "pjrt/c_api.h"
#include "pjrt/client.h"
#include "pjrt/ffi.h"

namespace switchyard::pjrt {
namespace {

// Destroys the unloaded view that metadata calls need.
class UnloadedExecutable {
 public:
  UnloadedExecutable(const PJRT_Api* api, PJRT_Executable* executable)
      : api_(api), executable_(executable) {}
  ~UnloadedExecutable() {
    Args<PJRT_Executable_Destroy_Args> args;
    args->executable = executable_;
    (void)SY_PJRT_CALL(api_, Executable_Destroy, args.get());
  }
  PJRT_Executable* get() const { return executable_; }

 private:
  const PJRT_Api* api_;
  PJRT_Executable* executable_;
};

absl::StatusOr<std::unique_ptr<UnloadedExecutable>> GetUnloaded(const PJRT_Api* api,
                                                                PJRT_LoadedExecutable* loaded) {
  Args<PJRT_LoadedExecutable_GetExecutable_Args> args;
  args->loaded_executable = loaded;
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, LoadedExecutable_GetExecutable, args.get()));
  return std::make_unique<UnloadedExecutable>(api, args->executable);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Executable>> Executable::Wrap(const Client* client,
                                                             PJRT_LoadedExecutable* handle) {
  auto executable = std::unique_ptr<Executable>(new Executable(client, handle));
  SY_RETURN_IF_ERROR(executable->ReadMetadata());
  return executable;
}

Executable::~Executable() {
  Args<PJRT_LoadedExecutable_Destroy_Args> args;
  args->executable = executable_;
  (void)SY_PJRT_CALL(client_->api(), LoadedExecutable_Destroy, args.get());
}

absl::Status Executable::ReadMetadata() {
  const PJRT_Api* api = client_->api();
  Args<PJRT_LoadedExecutable_AddressableDevices_Args> devices;
  devices->executable = executable_;
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, LoadedExecutable_AddressableDevices, devices.get()));
  for (size_t i = 0; i < devices->num_addressable_devices; ++i) {
    device_ordinals_.push_back(client_->OrdinalOf(devices->addressable_devices[i]));
  }

  SY_ASSIGN_OR_RETURN(auto unloaded, GetUnloaded(api, executable_));
  Args<PJRT_Executable_Name_Args> name;
  name->executable = unloaded->get();
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, Executable_Name, name.get()));
  name_.assign(name->executable_name, name->executable_name_size);
  Args<PJRT_Executable_NumReplicas_Args> replicas;
  replicas->executable = unloaded->get();
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, Executable_NumReplicas, replicas.get()));
  num_replicas_ = replicas->num_replicas;
  Args<PJRT_Executable_NumPartitions_Args> partitions;
  partitions->executable = unloaded->get();
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, Executable_NumPartitions, partitions.get()));
  num_partitions_ = partitions->num_partitions;

  Args<PJRT_Executable_OutputElementTypes_Args> types;
  types->executable = unloaded->get();
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, Executable_OutputElementTypes, types.get()));
  Args<PJRT_Executable_OutputDimensions_Args> dims;
  dims->executable = unloaded->get();
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, Executable_OutputDimensions, dims.get()));
  if (dims->num_outputs != types->num_output_types) {
    return absl::InternalError("PJRT plugin reported mismatched output counts");
  }
  const int64_t* next_dim = dims->dims;
  for (size_t i = 0; i < types->num_output_types; ++i) {
    OutputSpec spec;
    spec.dtype = FromPjrtType(types->output_types[i]);
    spec.dims.assign(next_dim, next_dim + dims->dim_sizes[i]);
    next_dim += dims->dim_sizes[i];
    outputs_.push_back(std::move(spec));
  }
  return absl::OkStatus();
}

absl::StatusOr<Launch> Executable::Execute(const std::vector<std::vector<const Buffer*>>& arguments,
                                           int launch_id, const ExecuteContext* context) const {
  const size_t num_devices = device_ordinals_.size();
  if (arguments.size() != num_devices) {
    return absl::InvalidArgumentError(absl::StrCat("executable '", name_, "' runs on ", num_devices,
                                                   " devices; got arguments for ",
                                                   arguments.size()));
  }
  const size_t num_args = num_devices == 0 ? 0 : arguments[0].size();
  std::vector<std::vector<PJRT_Buffer*>> argument_handles(num_devices);
  std::vector<PJRT_Buffer* const*> argument_lists(num_devices);
  for (size_t d = 0; d < num_devices; ++d) {
    if (arguments[d].size() != num_args) {
      return absl::InvalidArgumentError("every device needs the same number of arguments");
    }
    for (const Buffer* buffer : arguments[d]) {
      if (buffer->device_ordinal() != device_ordinals_[d]) {
        return absl::InvalidArgumentError(
            absl::StrCat("argument for launch device ", d, " lives on device ordinal ",
                         buffer->device_ordinal(), ", not ", device_ordinals_[d]));
      }
      argument_handles[d].push_back(buffer->handle());
    }
    argument_lists[d] = argument_handles[d].data();
  }
  const size_t num_outputs = outputs_.size();
  std::vector<std::vector<PJRT_Buffer*>> output_handles(num_devices,
                                                        std::vector<PJRT_Buffer*>(num_outputs));
  std::vector<PJRT_Buffer**> output_lists(num_devices);
  for (size_t d = 0; d < num_devices; ++d) output_lists[d] = output_handles[d].data();
  std::vector<PJRT_Event*> events(num_devices, nullptr);

  Args<PJRT_ExecuteOptions> options;
  options->launch_id = launch_id;
  if (context != nullptr) options->context = context->handle();
  Args<PJRT_LoadedExecutable_Execute_Args> args;
  args->executable = executable_;
  args->options = options.get();
  args->argument_lists = argument_lists.data();
  args->num_devices = num_devices;
  args->num_args = num_args;
  args->output_lists = output_lists.data();
  args->device_complete_events = events.data();
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(client_->api(), LoadedExecutable_Execute, args.get()));

  Launch launch;
  // Wrap every handle first so that none leaks if one wrap fails.
  for (size_t d = 0; d < num_devices; ++d) {
    launch.completions.push_back(std::make_unique<Event>(client_->api(), events[d]));
  }
  absl::Status first_error;
  launch.outputs.resize(num_devices);
  for (size_t d = 0; d < num_devices; ++d) {
    for (PJRT_Buffer* handle : output_handles[d]) {
      auto wrapped = Buffer::Wrap(client_, handle);
      if (wrapped.ok()) {
        launch.outputs[d].push_back(std::move(wrapped).value());
      } else if (first_error.ok()) {
        first_error = wrapped.status();
      }
    }
  }
  SY_RETURN_IF_ERROR(first_error);
  return launch;
}

absl::StatusOr<std::string> Executable::OptimizedProgram() const {
  const PJRT_Api* api = client_->api();
  SY_ASSIGN_OR_RETURN(auto unloaded, GetUnloaded(api, executable_));
  // Two calls: the first reports the size, the second fills our buffer.
  Args<PJRT_Program> program;
  Args<PJRT_Executable_OptimizedProgram_Args> args;
  args->executable = unloaded->get();
  args->program = program.get();
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, Executable_OptimizedProgram, args.get()));
  std::string code(program->code_size, '\0');
  program->code = code.data();
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, Executable_OptimizedProgram, args.get()));
  std::string format(program->format, program->format_size);
  if (format != "hlo_with_config") {
    return absl::UnimplementedError("optimized program comes as '" + format + "'");
  }
  return code;
}

absl::StatusOr<std::vector<std::pair<std::string, double>>> Executable::CostAnalysis() const {
  const PJRT_Api* api = client_->api();
  SY_ASSIGN_OR_RETURN(auto unloaded, GetUnloaded(api, executable_));
  Args<PJRT_Executable_GetCostAnalysis_Args> args;
  args->executable = unloaded->get();
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, Executable_GetCostAnalysis, args.get()));
  std::vector<std::pair<std::string, double>> costs;
  for (size_t i = 0; i < args->num_properties; ++i) {
    const PJRT_NamedValue& value = args->properties[i];
    std::string name(value.name, value.name_size);
    if (value.type == PJRT_NamedValue_kFloat) {
      costs.emplace_back(std::move(name), value.float_value);
    } else if (value.type == PJRT_NamedValue_kInt64) {
      costs.emplace_back(std::move(name), static_cast<double>(value.int64_value));
    }
  }
  return costs;
}

absl::StatusOr<CompiledMemoryStats> Executable::MemoryStats() const {
  const PJRT_Api* api = client_->api();
  SY_ASSIGN_OR_RETURN(auto unloaded, GetUnloaded(api, executable_));
  Args<PJRT_Executable_GetCompiledMemoryStats_Args> args;
  args->executable = unloaded->get();
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, Executable_GetCompiledMemoryStats, args.get()));
  CompiledMemoryStats stats;
  stats.generated_code = args->generated_code_size_in_bytes;
  stats.arguments = args->argument_size_in_bytes;
  stats.outputs = args->output_size_in_bytes;
  stats.alias = args->alias_size_in_bytes;
  stats.temp = args->temp_size_in_bytes;
  stats.host_generated_code = args->host_generated_code_size_in_bytes;
  stats.host_arguments = args->host_argument_size_in_bytes;
  stats.host_outputs = args->host_output_size_in_bytes;
  stats.host_alias = args->host_alias_size_in_bytes;
  stats.host_temp = args->host_temp_size_in_bytes;
  stats.peak = args->peak_memory_in_bytes;
  return stats;
}

absl::StatusOr<std::string> Executable::Serialize() const {
  const PJRT_Api* api = client_->api();
  SY_ASSIGN_OR_RETURN(auto unloaded, GetUnloaded(api, executable_));
  Args<PJRT_Executable_Serialize_Args> args;
  args->executable = unloaded->get();
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, Executable_Serialize, args.get()));
  std::string bytes(args->serialized_bytes, args->serialized_bytes_size);
  args->serialized_executable_deleter(args->serialized_executable);
  return bytes;
}

}  // namespace switchyard::pjrt
