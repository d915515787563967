#include "pjrt/client.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/copy_count.h"
#include "common/status_macros.h"
#include "pjrt/buffer.h"
#include "pjrt/c_api.h"
#include "pjrt/executable.h"
#include "pjrt/kv_callbacks.h"

namespace switchyard::pjrt {
namespace {

// The PJRT_NamedValue array and the storage its pointers refer to.
struct NamedValues {
  std::vector<PJRT_NamedValue> values;
  std::vector<std::vector<int64_t>> lists;
};

NamedValues ToNamedValues(const std::vector<ClientOption>& options) {
  NamedValues out;
  out.values.reserve(options.size());
  out.lists.reserve(options.size());
  for (const ClientOption& option : options) {
    PJRT_NamedValue value{};
    // Arrays cannot carry a tail per element; PJRT_NamedValue has not grown.
    value.struct_size = PJRT_NamedValue_STRUCT_SIZE;
    value.name = option.name.data();
    value.name_size = option.name.size();
    value.value_size = 1;
    if (auto* i = std::get_if<int64_t>(&option.value)) {
      value.type = PJRT_NamedValue_kInt64;
      value.int64_value = *i;
    } else if (auto* s = std::get_if<std::string>(&option.value)) {
      value.type = PJRT_NamedValue_kString;
      value.string_value = s->data();
      value.value_size = s->size();
    } else if (auto* b = std::get_if<bool>(&option.value)) {
      value.type = PJRT_NamedValue_kBool;
      value.bool_value = *b;
    } else if (auto* f = std::get_if<float>(&option.value)) {
      value.type = PJRT_NamedValue_kFloat;
      value.float_value = *f;
    } else {
      out.lists.push_back(std::get<std::vector<int64_t>>(option.value));
      value.type = PJRT_NamedValue_kInt64List;
      value.int64_array_value = out.lists.back().data();
      value.value_size = out.lists.back().size();
    }
    out.values.push_back(value);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Create(const Plugin* plugin,
                                                       const std::vector<ClientOption>& options,
                                                       KeyValueStore* kv_store) {
  const PJRT_Api* api = plugin->api();
  NamedValues named = ToNamedValues(options);
  Args<PJRT_Client_Create_Args> args;
  args->create_options = named.values.data();
  args->num_options = named.values.size();
  if (kv_store != nullptr) BindKeyValueStore(kv_store, args.get());
  absl::Status status = SY_PJRT_CALL(api, Client_Create, args.get());
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("creating a client of PJRT plugin '",
                                                    plugin->info().path, "': ", status.message()));
  }
  auto client = std::unique_ptr<Client>(new Client(plugin, args->client));

  Args<PJRT_Client_PlatformName_Args> name;
  name->client = client->client_;
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, Client_PlatformName, name.get()));
  client->platform_name_.assign(name->platform_name, name->platform_name_size);
  Args<PJRT_Client_PlatformVersion_Args> version;
  version->client = client->client_;
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, Client_PlatformVersion, version.get()));
  client->platform_version_.assign(version->platform_version, version->platform_version_size);
  SY_RETURN_IF_ERROR(client->ReadDevices());
  return client;
}

Client::~Client() {
  Args<PJRT_Client_Destroy_Args> args;
  args->client = client_;
  (void)SY_PJRT_CALL(api(), Client_Destroy, args.get());
}

absl::Status Client::ReadDevices() {
  const PJRT_Api* api = this->api();
  Args<PJRT_Client_AddressableDevices_Args> list;
  list->client = client_;
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, Client_AddressableDevices, list.get()));
  for (size_t i = 0; i < list->num_addressable_devices; ++i) {
    PJRT_Device* device = list->addressable_devices[i];
    DeviceDesc desc;
    desc.ordinal = static_cast<int>(i);

    Args<PJRT_Device_GetDescription_Args> description;
    description->device = device;
    SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, Device_GetDescription, description.get()));
    Args<PJRT_DeviceDescription_Id_Args> id;
    id->device_description = description->device_description;
    SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, DeviceDescription_Id, id.get()));
    desc.id = id->id;
    Args<PJRT_DeviceDescription_Kind_Args> kind;
    kind->device_description = description->device_description;
    SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, DeviceDescription_Kind, kind.get()));
    desc.kind.assign(kind->device_kind, kind->device_kind_size);
    Args<PJRT_Device_LocalHardwareId_Args> hardware_id;
    hardware_id->device = device;
    SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, Device_LocalHardwareId, hardware_id.get()));
    desc.local_hardware_id = hardware_id->local_hardware_id;

    Args<PJRT_Device_AddressableMemories_Args> memories;
    memories->device = device;
    SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, Device_AddressableMemories, memories.get()));
    memory_handles_.emplace_back(memories->memories, memories->memories + memories->num_memories);
    for (size_t m = 0; m < memories->num_memories; ++m) {
      MemoryDesc memory;
      Args<PJRT_Memory_Id_Args> memory_id;
      memory_id->memory = memories->memories[m];
      SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, Memory_Id, memory_id.get()));
      memory.id = memory_id->id;
      Args<PJRT_Memory_Kind_Args> memory_kind;
      memory_kind->memory = memories->memories[m];
      SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, Memory_Kind, memory_kind.get()));
      memory.kind.assign(memory_kind->kind, memory_kind->kind_size);
      desc.memories.push_back(std::move(memory));
    }
    Args<PJRT_Device_DefaultMemory_Args> default_memory;
    default_memory->device = device;
    if (SY_PJRT_CALL(api, Device_DefaultMemory, default_memory.get()).ok()) {
      Args<PJRT_Memory_Kind_Args> memory_kind;
      memory_kind->memory = default_memory->memory;
      if (SY_PJRT_CALL(api, Memory_Kind, memory_kind.get()).ok()) {
        desc.default_memory_kind.assign(memory_kind->kind, memory_kind->kind_size);
      }
    }
    devices_.push_back(std::move(desc));
    device_handles_.push_back(device);
  }
  return absl::OkStatus();
}

int Client::OrdinalOf(const PJRT_Device* device) const {
  for (size_t i = 0; i < device_handles_.size(); ++i) {
    if (device_handles_[i] == device) return static_cast<int>(i);
  }
  return -1;
}

absl::StatusOr<std::unique_ptr<Buffer>> Client::BufferFromHost(
    absl::Span<const char> data, DType dtype, absl::Span<const int64_t> dims, int ordinal,
    const std::string& memory_kind, absl::Span<const int64_t> device_minor_to_major) const {
  PJRT_Event* done_with_data = nullptr;
  auto buffer = StartBufferFromHost(data, dtype, dims, ordinal, memory_kind, device_minor_to_major,
                                    /*zero_copy=*/false, &done_with_data);
  // The caller may free `data` when we return.
  Event done(api(), done_with_data);
  SY_RETURN_IF_ERROR(done.Await());
  return buffer;
}

absl::StatusOr<std::unique_ptr<Buffer>> Client::BufferFromOwnedHost(
    std::shared_ptr<const HostBytes> data, DType dtype, absl::Span<const int64_t> dims, int ordinal,
    const std::string& memory_kind) const {
  PJRT_Event* done_with_data = nullptr;
  // Only the CPU client is known to alias host bytes; elsewhere zero-copy semantics are
  // not asked for, and the bytes live until the copy is done.
  auto buffer = StartBufferFromHost(data->span(), dtype, dims, ordinal, memory_kind, {},
                                    /*zero_copy=*/platform_name_ == "cpu", &done_with_data);
  // The last user frees the bytes. A plugin that cannot say when it is done with them
  // (no OnReady) keeps them: waiting here would wait for the buffer's end.
  PJRT_Event* unregistered = Event::Then(api(), done_with_data, [data](absl::Status) {});
  if (unregistered != nullptr) new std::shared_ptr<const HostBytes>(data);  // kept for good
  return buffer;
}

absl::StatusOr<std::unique_ptr<Buffer>> Client::StartBufferFromHost(
    absl::Span<const char> data, DType dtype, absl::Span<const int64_t> dims, int ordinal,
    const std::string& memory_kind, absl::Span<const int64_t> device_minor_to_major, bool zero_copy,
    PJRT_Event** done_with_data) const {
  if (ordinal < 0 || ordinal >= static_cast<int>(devices_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ordinal ", ordinal, " out of range [0, ", devices_.size(), ")"));
  }
  PJRT_Buffer_Type type = ToPjrtType(dtype);
  if (type == PJRT_Buffer_Type_INVALID) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported dtype ", DTypeName(dtype)));
  }
  int64_t elements = 1;
  for (int64_t dim : dims) {
    if (dim < 0) return absl::InvalidArgumentError("negative dimension");
    elements *= dim;
  }
  int64_t expected = HostByteSize(dtype, elements);
  if (expected != static_cast<int64_t>(data.size())) {
    return absl::InvalidArgumentError(absl::StrCat("host data has ", data.size(), " bytes; ",
                                                   DTypeName(dtype), "[", absl::StrJoin(dims, ","),
                                                   "] needs ", expected));
  }
  if (!device_minor_to_major.empty() && device_minor_to_major.size() != dims.size()) {
    return absl::InvalidArgumentError(absl::StrCat("a device layout of ",
                                                   device_minor_to_major.size(),
                                                   " dimensions for an array of ", dims.size()));
  }
  Args<PJRT_Buffer_MemoryLayout> layout;
  Args<PJRT_Client_BufferFromHostBuffer_Args> args;
  if (!device_minor_to_major.empty()) {
    layout->type = PJRT_Buffer_MemoryLayout_Type_Tiled;
    layout->tiled.struct_size = sizeof(PJRT_Buffer_MemoryLayout_Tiled);
    layout->tiled.minor_to_major = device_minor_to_major.data();
    layout->tiled.minor_to_major_size = device_minor_to_major.size();
    args->device_layout = layout.get();
  }
  args->client = client_;
  args->data = data.data();
  args->type = type;
  args->dims = dims.data();
  args->num_dims = dims.size();
  args->host_buffer_semantics = zero_copy
                                    ? PJRT_HostBufferSemantics_kImmutableZeroCopy
                                    : PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
  args->device = device_handles_[ordinal];
  if (!memory_kind.empty() && memory_kind != devices_[ordinal].default_memory_kind) {
    const auto& memories = devices_[ordinal].memories;
    auto it = std::find_if(memories.begin(), memories.end(),
                           [&](const MemoryDesc& m) { return m.kind == memory_kind; });
    if (it == memories.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("device ordinal ", ordinal, " has no memory of kind '", memory_kind, "'"));
    }
    args->memory = memory_handles_[ordinal][it - memories.begin()];
  }
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(api(), Client_BufferFromHostBuffer, args.get()));
  if (!zero_copy) CountCopied(data.size());  // else the buffer aliases the bytes
  *done_with_data = args->done_with_host_buffer;
  return Buffer::Wrap(this, args->buffer);
}

absl::StatusOr<std::unique_ptr<Executable>> Client::Compile(
    absl::Span<const char> program, const std::string& format,
    absl::Span<const char> compile_options) const {
  Args<PJRT_Program> code;
  code->code = const_cast<char*>(program.data());
  code->code_size = program.size();
  code->format = format.data();
  code->format_size = format.size();
  Args<PJRT_Client_Compile_Args> args;
  args->client = client_;
  args->program = code.get();
  args->compile_options = compile_options.data();
  args->compile_options_size = compile_options.size();
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(api(), Client_Compile, args.get()));
  return Executable::Wrap(this, args->executable);
}

absl::StatusOr<std::unique_ptr<Executable>> Client::Deserialize(
    absl::Span<const char> bytes) const {
  Args<PJRT_Executable_DeserializeAndLoad_Args> args;
  args->client = client_;
  args->serialized_executable = bytes.data();
  args->serialized_executable_size = bytes.size();
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(api(), Executable_DeserializeAndLoad, args.get()));
  return Executable::Wrap(this, args->loaded_executable);
}

}  // namespace switchyard::pjrt
