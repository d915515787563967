// A PJRT plugin with no device behind it, for simulated hosts (`switchyard worker
// --simulate`): the worker around it is the real one, so a fleet of simulated hosts
// exercises the real control plane at a scale no machine here could hold with real
// plugins. What it does:
// - devices look like the CPU plugin's ("cpu", three memories each);
// - buffers hold their bytes, so puts, fetches and transfers carry real data (a
//   launch's outputs are zeros, held as none);
// - it compiles only `kSimulatedProgramFormat`: the metadata of a real compile of the
//   program on another worker (the proxy sends it), never a program itself;
// - a launch's outputs are zeros, computed `launch_micros` after its inputs and the
//   device's previous launch (one device runs one launch at a time).
// One timer thread per process serves every simulated client in it.

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/simulated_program.h"
#include "common/thread_name.h"
#include "pjrt/c_api.h"
#include "pjrt/plugin.h"

// The plugin's objects. The C header declares them; only this file defines them.
struct PJRT_Error {
  absl::Status status;
};

namespace switchyard::pjrt {
namespace {

// A value that becomes ready once, with a status; what events and buffers wait on.
class Readiness {
 public:
  void Set(absl::Status status) {
    std::vector<std::function<void(absl::Status)>> waiters;
    {
      absl::MutexLock lock(&mutex_);
      if (ready_) return;
      ready_ = true;
      status_ = status;
      waiters.swap(waiters_);
    }
    for (auto& waiter : waiters) waiter(status);
  }
  // Calls `done` once ready: at once, or on the thread that makes it ready.
  void Then(std::function<void(absl::Status)> done) {
    absl::Status status;
    {
      absl::MutexLock lock(&mutex_);
      if (!ready_) {
        waiters_.push_back(std::move(done));
        return;
      }
      status = status_;
    }
    done(status);
  }
  absl::Status Await() {
    absl::MutexLock lock(&mutex_);
    mutex_.Await(absl::Condition(&ready_));
    return status_;
  }

 private:
  absl::Mutex mutex_;
  bool ready_ ABSL_GUARDED_BY(mutex_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::function<void(absl::Status)>> waiters_ ABSL_GUARDED_BY(mutex_);
};

std::shared_ptr<Readiness> Ready(absl::Status status = absl::OkStatus()) {
  auto ready = std::make_shared<Readiness>();
  ready->Set(std::move(status));
  return ready;
}

// Runs functions at given times, on one thread for the whole process.
class Timer {
 public:
  static Timer& Get() {
    static auto* timer = new Timer();  // lives with the process: clients may outlive main
    return *timer;
  }
  void At(absl::Time when, std::function<void()> run) {
    absl::MutexLock lock(&mutex_);
    queue_.push({when, next_++, std::move(run)});
    pushed_ = true;
  }

 private:
  struct Entry {
    absl::Time when;
    uint64_t order;
    std::function<void()> run;
    bool operator>(const Entry& other) const {
      return when != other.when ? when > other.when : order > other.order;
    }
  };
  Timer() {
    std::thread([this] { Loop(); }).detach();
  }
  void Loop() {
    NameThisThread("sy-sim-device");
    for (;;) {
      std::function<void()> run;
      {
        absl::MutexLock lock(&mutex_);
        for (;;) {
          const absl::Time now = absl::Now();
          if (!queue_.empty() && queue_.top().when <= now) break;
          pushed_ = false;  // an earlier entry may come while we wait
          mutex_.AwaitWithDeadline(absl::Condition(&pushed_),
                                   queue_.empty() ? now + absl::Seconds(1) : queue_.top().when);
        }
        run = std::move(const_cast<Entry&>(queue_.top()).run);
        queue_.pop();
      }
      run();
    }
  }
  absl::Mutex mutex_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue_ ABSL_GUARDED_BY(mutex_);
  uint64_t next_ ABSL_GUARDED_BY(mutex_) = 0;
  bool pushed_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace
}  // namespace switchyard::pjrt

using switchyard::pjrt::Readiness;

struct PJRT_Event {
  std::shared_ptr<Readiness> ready;
};

struct PJRT_DeviceDescription {
  int id = 0;
};

struct PJRT_Memory {
  int id = 0;
  std::string kind;
};

struct PJRT_Device {
  PJRT_DeviceDescription description;
  std::vector<std::unique_ptr<PJRT_Memory>> memories;
  std::vector<PJRT_Memory*> memory_list;
  absl::Mutex mutex;
  absl::Time busy_until ABSL_GUARDED_BY(mutex) = absl::InfinitePast();
};

struct PJRT_Client {
  std::vector<std::unique_ptr<PJRT_Device>> devices;
  std::vector<PJRT_Device*> device_list;
  absl::Duration launch_time = absl::ZeroDuration();
};

struct PJRT_Buffer {
  PJRT_Buffer_Type type = PJRT_Buffer_Type_INVALID;
  std::vector<int64_t> dims;
  std::vector<int64_t> minor_to_major;
  PJRT_Device* device = nullptr;
  PJRT_Memory* memory = nullptr;
  int64_t size = 0;
  // What a put gave; empty for a launch's output, whose bytes are all zeros (held as
  // none, so a simulated host's memory does not grow with its programs' outputs).
  std::shared_ptr<const std::string> bytes;
  std::shared_ptr<Readiness> ready;
};

struct PJRT_Executable {
  switchyard::SimulatedProgram program;
  std::vector<PJRT_Buffer_Type> types;
  std::vector<int64_t> dims;  // all outputs' dimensions, one after another
  std::vector<size_t> ranks;
};

struct PJRT_LoadedExecutable {
  PJRT_Client* client = nullptr;
  std::shared_ptr<PJRT_Executable> executable;
  std::vector<PJRT_Device*> devices;
};

struct PJRT_ExecuteContext {};

namespace switchyard::pjrt {
namespace {

PJRT_Error* Fail(absl::Status status) {
  if (status.ok()) return nullptr;
  return new PJRT_Error{std::move(status)};
}

PJRT_Error* Unimplemented(const char* what) {
  return Fail(absl::UnimplementedError(absl::StrCat("a simulated host has no ", what)));
}

int64_t ByteSize(PJRT_Buffer_Type type, const std::vector<int64_t>& dims) {
  int64_t elements = 1;
  for (int64_t dim : dims) elements *= dim;
  return HostByteSize(FromPjrtType(type), elements);
}

PJRT_Event* NewEvent(std::shared_ptr<Readiness> ready) { return new PJRT_Event{std::move(ready)}; }

// --- errors, plugin, events ---

void ErrorDestroy(PJRT_Error_Destroy_Args* args) { delete args->error; }

void ErrorMessage(PJRT_Error_Message_Args* args) {
  const absl::string_view message = args->error->status.message();
  args->message = message.data();
  args->message_size = message.size();
}

PJRT_Error* ErrorGetCode(PJRT_Error_GetCode_Args* args) {
  // PJRT_Error_Code numbers are absl's.
  args->code = static_cast<PJRT_Error_Code>(static_cast<int>(args->error->status.code()));
  return nullptr;
}

PJRT_Error* PluginInitialize(PJRT_Plugin_Initialize_Args*) { return nullptr; }

PJRT_Error* PluginAttributes(PJRT_Plugin_Attributes_Args* args) {
  static const PJRT_NamedValue* attributes = [] {
    static constexpr char kName[] = "switchyard_simulated";
    auto* value = new PJRT_NamedValue{};
    value->struct_size = sizeof(PJRT_NamedValue);
    value->name = kName;
    value->name_size = sizeof(kName) - 1;
    value->type = PJRT_NamedValue_kBool;
    value->bool_value = true;
    value->value_size = 1;
    return value;
  }();
  args->attributes = attributes;
  args->num_attributes = 1;
  return nullptr;
}

PJRT_Error* EventDestroy(PJRT_Event_Destroy_Args* args) {
  delete args->event;
  return nullptr;
}

PJRT_Error* EventAwait(PJRT_Event_Await_Args* args) { return Fail(args->event->ready->Await()); }

PJRT_Error* EventOnReady(PJRT_Event_OnReady_Args* args) {
  // The callback may destroy the event: hold the readiness, not the event.
  PJRT_Event_OnReadyCallback callback = args->callback;
  void* user_arg = args->user_arg;
  args->event->ready->Then(
      [callback, user_arg](absl::Status status) { callback(Fail(std::move(status)), user_arg); });
  return nullptr;
}

// --- the client and its devices ---

PJRT_Error* ClientCreate(PJRT_Client_Create_Args* args) {
  int64_t devices = 1;
  int64_t launch_micros = 0;
  for (size_t i = 0; i < args->num_options; ++i) {
    const PJRT_NamedValue& option = args->create_options[i];
    const absl::string_view name(option.name, option.name_size);
    if (option.type != PJRT_NamedValue_kInt64) continue;
    if (name == "cpu_device_count") devices = option.int64_value;
    if (name == "launch_micros") launch_micros = option.int64_value;
  }
  if (devices < 1 || devices > 1024 || launch_micros < 0) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("a simulated host has 1 to 1024 devices and launches of 0 us or more, not ",
                     devices, " devices and ", launch_micros, " us")));
  }
  auto client = std::make_unique<PJRT_Client>();
  client->launch_time = absl::Microseconds(launch_micros);
  for (int d = 0; d < devices; ++d) {
    auto device = std::make_unique<PJRT_Device>();
    device->description.id = d;
    int kind = 0;
    for (const char* name : {"device", "pinned_host", "unpinned_host"}) {
      device->memories.push_back(
          std::make_unique<PJRT_Memory>(PJRT_Memory{static_cast<int>(d * 3 + kind++), name}));
      device->memory_list.push_back(device->memories.back().get());
    }
    client->device_list.push_back(device.get());
    client->devices.push_back(std::move(device));
  }
  args->client = client.release();
  return nullptr;
}

PJRT_Error* ClientDestroy(PJRT_Client_Destroy_Args* args) {
  delete args->client;
  return nullptr;
}

PJRT_Error* ClientPlatformName(PJRT_Client_PlatformName_Args* args) {
  static constexpr char kName[] = "cpu";  // clients see ordinary CPU devices
  args->platform_name = kName;
  args->platform_name_size = sizeof(kName) - 1;
  return nullptr;
}

PJRT_Error* ClientPlatformVersion(PJRT_Client_PlatformVersion_Args* args) {
  static constexpr char kVersion[] = "simulated";
  args->platform_version = kVersion;
  args->platform_version_size = sizeof(kVersion) - 1;
  return nullptr;
}

PJRT_Error* ClientAddressableDevices(PJRT_Client_AddressableDevices_Args* args) {
  args->addressable_devices = args->client->device_list.data();
  args->num_addressable_devices = args->client->device_list.size();
  return nullptr;
}

PJRT_Error* DeviceGetDescription(PJRT_Device_GetDescription_Args* args) {
  args->device_description = &args->device->description;
  return nullptr;
}

PJRT_Error* DeviceDescriptionId(PJRT_DeviceDescription_Id_Args* args) {
  args->id = args->device_description->id;
  return nullptr;
}

PJRT_Error* DeviceDescriptionKind(PJRT_DeviceDescription_Kind_Args* args) {
  static constexpr char kKind[] = "cpu";
  args->device_kind = kKind;
  args->device_kind_size = sizeof(kKind) - 1;
  return nullptr;
}

PJRT_Error* DeviceLocalHardwareId(PJRT_Device_LocalHardwareId_Args* args) {
  args->local_hardware_id = args->device->description.id;
  return nullptr;
}

PJRT_Error* DeviceAddressableMemories(PJRT_Device_AddressableMemories_Args* args) {
  args->memories = args->device->memory_list.data();
  args->num_memories = args->device->memory_list.size();
  return nullptr;
}

PJRT_Error* DeviceDefaultMemory(PJRT_Device_DefaultMemory_Args* args) {
  args->memory = args->device->memory_list[0];
  return nullptr;
}

PJRT_Error* MemoryId(PJRT_Memory_Id_Args* args) {
  args->id = args->memory->id;
  return nullptr;
}

PJRT_Error* MemoryKind(PJRT_Memory_Kind_Args* args) {
  args->kind = args->memory->kind.data();
  args->kind_size = args->memory->kind.size();
  return nullptr;
}

// --- buffers ---

PJRT_Buffer* NewBuffer(PJRT_Buffer_Type type, std::vector<int64_t> dims, PJRT_Device* device,
                       PJRT_Memory* memory) {
  auto* buffer = new PJRT_Buffer();
  buffer->type = type;
  buffer->dims = std::move(dims);
  for (int64_t d = static_cast<int64_t>(buffer->dims.size()) - 1; d >= 0; --d) {
    buffer->minor_to_major.push_back(d);
  }
  buffer->device = device;
  buffer->memory = memory != nullptr ? memory : device->memory_list[0];
  buffer->size = ByteSize(type, buffer->dims);
  return buffer;
}

PJRT_Error* BufferFromHostBuffer(PJRT_Client_BufferFromHostBuffer_Args* args) {
  if (args->num_byte_strides != 0) return Unimplemented("strided host buffers");
  if (args->device == nullptr) return Unimplemented("buffers without a device");
  std::vector<int64_t> dims(args->dims, args->dims + args->num_dims);
  PJRT_Buffer* buffer = NewBuffer(args->type, std::move(dims), args->device, args->memory);
  buffer->bytes =
      std::make_shared<const std::string>(static_cast<const char*>(args->data), buffer->size);
  buffer->ready = Ready();
  args->done_with_host_buffer = nullptr;  // copied already
  args->buffer = buffer;
  return nullptr;
}

PJRT_Error* BufferDestroy(PJRT_Buffer_Destroy_Args* args) {
  delete args->buffer;
  return nullptr;
}

PJRT_Error* BufferElementType(PJRT_Buffer_ElementType_Args* args) {
  args->type = args->buffer->type;
  return nullptr;
}

PJRT_Error* BufferDimensions(PJRT_Buffer_Dimensions_Args* args) {
  args->dims = args->buffer->dims.data();
  args->num_dims = args->buffer->dims.size();
  return nullptr;
}

PJRT_Error* BufferDevice(PJRT_Buffer_Device_Args* args) {
  args->device = args->buffer->device;
  return nullptr;
}

PJRT_Error* BufferMemory(PJRT_Buffer_Memory_Args* args) {
  args->memory = args->buffer->memory;
  return nullptr;
}

PJRT_Error* BufferGetMemoryLayout(PJRT_Buffer_GetMemoryLayout_Args* args) {
  args->layout.type = PJRT_Buffer_MemoryLayout_Type_Tiled;
  args->layout.tiled.struct_size = sizeof(PJRT_Buffer_MemoryLayout_Tiled);
  args->layout.tiled.minor_to_major = args->buffer->minor_to_major.data();
  args->layout.tiled.minor_to_major_size = args->buffer->minor_to_major.size();
  args->layout.tiled.num_tiles = 0;
  return nullptr;
}

PJRT_Error* BufferOnDeviceSizeInBytes(PJRT_Buffer_OnDeviceSizeInBytes_Args* args) {
  args->on_device_size_in_bytes = args->buffer->size;
  return nullptr;
}

PJRT_Error* BufferReadyEvent(PJRT_Buffer_ReadyEvent_Args* args) {
  args->event = NewEvent(args->buffer->ready);
  return nullptr;
}

// Copies bytes [offset, offset + size) of `buffer` to `dst` once it is computed.
PJRT_Event* CopyOut(const PJRT_Buffer& buffer, void* dst, int64_t offset, int64_t size) {
  auto done = std::make_shared<Readiness>();
  if (offset > buffer.size || size > buffer.size - offset) {
    done->Set(absl::OutOfRangeError("a copy past the end of a simulated buffer"));
    return NewEvent(std::move(done));
  }
  std::shared_ptr<const std::string> bytes = buffer.bytes;
  buffer.ready->Then([done, bytes, dst, offset, size](absl::Status status) {
    if (status.ok()) {
      char* out = static_cast<char*>(dst);
      const int64_t held = bytes == nullptr ? 0 : static_cast<int64_t>(bytes->size());
      const int64_t from_bytes = std::clamp<int64_t>(held - offset, 0, size);
      if (from_bytes > 0) std::copy_n(bytes->data() + offset, from_bytes, out);
      std::fill_n(out + from_bytes, size - from_bytes, '\0');
    }
    done->Set(status);
  });
  return NewEvent(std::move(done));
}

PJRT_Error* BufferToHostBuffer(PJRT_Buffer_ToHostBuffer_Args* args) {
  const int64_t size = args->src->size;
  if (args->dst == nullptr) {
    args->dst_size = size;
    return nullptr;
  }
  if (args->host_layout != nullptr) return Unimplemented("host layouts");
  if (static_cast<int64_t>(args->dst_size) < size) {
    return Fail(absl::InvalidArgumentError("the destination is smaller than the buffer"));
  }
  args->event = CopyOut(*args->src, args->dst, 0, size);
  return nullptr;
}

PJRT_Error* BufferCopyRawToHost(PJRT_Buffer_CopyRawToHost_Args* args) {
  if (args->offset < 0 || args->transfer_size < 0) {
    return Fail(absl::InvalidArgumentError("a negative range"));
  }
  args->event = CopyOut(*args->buffer, args->dst, args->offset, args->transfer_size);
  return nullptr;
}

// --- programs ---

PJRT_Error* ClientCompile(PJRT_Client_Compile_Args* args) {
  const absl::string_view format(args->program->format, args->program->format_size);
  if (format != kSimulatedProgramFormat) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "a simulated host compiles no '", format,
        "' program: it takes the metadata of a real compile (format ", kSimulatedProgramFormat,
        "), which the proxy sends when the session has a real worker to compile on")));
  }
  absl::StatusOr<SimulatedProgram> program =
      DecodeSimulatedProgram(absl::string_view(args->program->code, args->program->code_size));
  if (!program.ok()) return Fail(program.status());
  auto loaded = std::make_unique<PJRT_LoadedExecutable>();
  loaded->client = args->client;
  for (int ordinal : program->device_ordinals) {
    if (ordinal >= static_cast<int>(args->client->device_list.size())) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("a simulated program on device ", ordinal,
                                                          " of a host with ",
                                                          args->client->device_list.size())));
    }
    loaded->devices.push_back(args->client->device_list[ordinal]);
  }
  auto executable = std::make_shared<PJRT_Executable>();
  for (const SimulatedProgram::Output& output : program->outputs) {
    const PJRT_Buffer_Type type = ToPjrtType(static_cast<DType>(output.dtype));
    if (type == PJRT_Buffer_Type_INVALID) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("an output of type ", output.dtype)));
    }
    executable->types.push_back(type);
    executable->dims.insert(executable->dims.end(), output.dims.begin(), output.dims.end());
    executable->ranks.push_back(output.dims.size());
  }
  executable->program = *std::move(program);
  loaded->executable = std::move(executable);
  args->executable = loaded.release();
  return nullptr;
}

PJRT_Error* LoadedExecutableDestroy(PJRT_LoadedExecutable_Destroy_Args* args) {
  delete args->executable;
  return nullptr;
}

PJRT_Error* LoadedExecutableGetExecutable(PJRT_LoadedExecutable_GetExecutable_Args* args) {
  // A view that shares the program; destroyed on its own.
  args->executable = new PJRT_Executable(*args->loaded_executable->executable);
  return nullptr;
}

PJRT_Error* LoadedExecutableAddressableDevices(
    PJRT_LoadedExecutable_AddressableDevices_Args* args) {
  args->addressable_devices = args->executable->devices.data();
  args->num_addressable_devices = args->executable->devices.size();
  return nullptr;
}

PJRT_Error* ExecutableDestroy(PJRT_Executable_Destroy_Args* args) {
  delete args->executable;
  return nullptr;
}

PJRT_Error* ExecutableName(PJRT_Executable_Name_Args* args) {
  args->executable_name = args->executable->program.name.data();
  args->executable_name_size = args->executable->program.name.size();
  return nullptr;
}

PJRT_Error* ExecutableNumReplicas(PJRT_Executable_NumReplicas_Args* args) {
  args->num_replicas = args->executable->program.num_replicas;
  return nullptr;
}

PJRT_Error* ExecutableNumPartitions(PJRT_Executable_NumPartitions_Args* args) {
  args->num_partitions = args->executable->program.num_partitions;
  return nullptr;
}

PJRT_Error* ExecutableOutputElementTypes(PJRT_Executable_OutputElementTypes_Args* args) {
  args->output_types = args->executable->types.data();
  args->num_output_types = args->executable->types.size();
  return nullptr;
}

PJRT_Error* ExecutableOutputDimensions(PJRT_Executable_OutputDimensions_Args* args) {
  args->num_outputs = args->executable->ranks.size();
  args->dims = args->executable->dims.data();
  args->dim_sizes = args->executable->ranks.data();
  return nullptr;
}

PJRT_Error* ExecuteContextCreate(PJRT_ExecuteContext_Create_Args* args) {
  args->context = new PJRT_ExecuteContext();
  return nullptr;
}

PJRT_Error* ExecuteContextDestroy(PJRT_ExecuteContext_Destroy_Args* args) {
  delete args->context;
  return nullptr;
}

// Once every one of `inputs` is ready: the first error among them, or OK.
void AfterAll(const std::vector<std::shared_ptr<Readiness>>& inputs,
              std::function<void(absl::Status)> done) {
  struct Count {
    absl::Mutex mutex;
    size_t left;
    absl::Status first;
    std::function<void(absl::Status)> done;
  };
  auto count = std::make_shared<Count>();
  count->left = inputs.size() + 1;  // +1: this call's own, so `done` runs once
  count->done = std::move(done);
  auto arrive = [count](absl::Status status) {
    absl::Status result;
    {
      absl::MutexLock lock(&count->mutex);
      if (count->first.ok()) count->first = status;
      if (--count->left > 0) return;
      result = count->first;
    }
    count->done(result);
  };
  for (const auto& input : inputs) input->Then(arrive);
  arrive(absl::OkStatus());
}

PJRT_Error* LoadedExecutableExecute(PJRT_LoadedExecutable_Execute_Args* args) {
  const PJRT_LoadedExecutable& loaded = *args->executable;
  if (args->num_devices != loaded.devices.size()) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "the program runs on ", loaded.devices.size(), " devices, not ", args->num_devices)));
  }
  const PJRT_Executable& executable = *loaded.executable;
  const absl::Duration launch_time = loaded.client->launch_time;
  for (size_t d = 0; d < args->num_devices; ++d) {
    PJRT_Device* device = loaded.devices[d];
    std::vector<std::shared_ptr<Readiness>> inputs;
    for (size_t a = 0; a < args->num_args; ++a) inputs.push_back(args->argument_lists[d][a]->ready);
    auto done = std::make_shared<Readiness>();
    size_t next_dim = 0;
    for (size_t o = 0; o < executable.types.size(); ++o) {
      std::vector<int64_t> dims(executable.dims.begin() + next_dim,
                                executable.dims.begin() + next_dim + executable.ranks[o]);
      next_dim += executable.ranks[o];
      PJRT_Buffer* buffer = NewBuffer(executable.types[o], std::move(dims), device, nullptr);
      buffer->ready = done;  // zeros: no bytes held
      args->output_lists[d][o] = buffer;
    }
    if (args->device_complete_events != nullptr) args->device_complete_events[d] = NewEvent(done);
    AfterAll(inputs, [device, done, launch_time](absl::Status status) {
      if (!status.ok()) {
        done->Set(status);
        return;
      }
      absl::Time end;
      {
        absl::MutexLock lock(&device->mutex);
        end = std::max(absl::Now(), device->busy_until) + launch_time;
        device->busy_until = end;
      }
      Timer::Get().At(end, [done] { done->Set(absl::OkStatus()); });
    });
  }
  return nullptr;
}

const PJRT_Api* SimulatedApi() {
  static const PJRT_Api* api = [] {
    auto* table = new PJRT_Api{};
    table->struct_size = sizeof(PJRT_Api);
    table->pjrt_api_version.struct_size = sizeof(PJRT_Api_Version);
    table->pjrt_api_version.major_version = PJRT_API_MAJOR;
    table->pjrt_api_version.minor_version = PJRT_API_MINOR;
    table->PJRT_Error_Destroy = ErrorDestroy;
    table->PJRT_Error_Message = ErrorMessage;
    table->PJRT_Error_GetCode = ErrorGetCode;
    table->PJRT_Plugin_Initialize = PluginInitialize;
    table->PJRT_Plugin_Attributes = PluginAttributes;
    table->PJRT_Event_Destroy = EventDestroy;
    table->PJRT_Event_Await = EventAwait;
    table->PJRT_Event_OnReady = EventOnReady;
    table->PJRT_Client_Create = ClientCreate;
    table->PJRT_Client_Destroy = ClientDestroy;
    table->PJRT_Client_PlatformName = ClientPlatformName;
    table->PJRT_Client_PlatformVersion = ClientPlatformVersion;
    table->PJRT_Client_AddressableDevices = ClientAddressableDevices;
    table->PJRT_Client_Compile = ClientCompile;
    table->PJRT_Client_BufferFromHostBuffer = BufferFromHostBuffer;
    table->PJRT_Device_GetDescription = DeviceGetDescription;
    table->PJRT_DeviceDescription_Id = DeviceDescriptionId;
    table->PJRT_DeviceDescription_Kind = DeviceDescriptionKind;
    table->PJRT_Device_LocalHardwareId = DeviceLocalHardwareId;
    table->PJRT_Device_AddressableMemories = DeviceAddressableMemories;
    table->PJRT_Device_DefaultMemory = DeviceDefaultMemory;
    table->PJRT_Memory_Id = MemoryId;
    table->PJRT_Memory_Kind = MemoryKind;
    table->PJRT_Buffer_Destroy = BufferDestroy;
    table->PJRT_Buffer_ElementType = BufferElementType;
    table->PJRT_Buffer_Dimensions = BufferDimensions;
    table->PJRT_Buffer_Device = BufferDevice;
    table->PJRT_Buffer_Memory = BufferMemory;
    table->PJRT_Buffer_GetMemoryLayout = BufferGetMemoryLayout;
    table->PJRT_Buffer_OnDeviceSizeInBytes = BufferOnDeviceSizeInBytes;
    table->PJRT_Buffer_ReadyEvent = BufferReadyEvent;
    table->PJRT_Buffer_ToHostBuffer = BufferToHostBuffer;
    table->PJRT_Buffer_CopyRawToHost = BufferCopyRawToHost;
    table->PJRT_LoadedExecutable_Destroy = LoadedExecutableDestroy;
    table->PJRT_LoadedExecutable_GetExecutable = LoadedExecutableGetExecutable;
    table->PJRT_LoadedExecutable_AddressableDevices = LoadedExecutableAddressableDevices;
    table->PJRT_LoadedExecutable_Execute = LoadedExecutableExecute;
    table->PJRT_Executable_Destroy = ExecutableDestroy;
    table->PJRT_Executable_Name = ExecutableName;
    table->PJRT_Executable_NumReplicas = ExecutableNumReplicas;
    table->PJRT_Executable_NumPartitions = ExecutableNumPartitions;
    table->PJRT_Executable_OutputElementTypes = ExecutableOutputElementTypes;
    table->PJRT_Executable_OutputDimensions = ExecutableOutputDimensions;
    table->PJRT_ExecuteContext_Create = ExecuteContextCreate;
    table->PJRT_ExecuteContext_Destroy = ExecuteContextDestroy;
    return table;
  }();
  return api;
}

}  // namespace

absl::StatusOr<Plugin*> Plugin::LoadSimulated() {
  return Adopt(kSimulatedPluginPath, SimulatedApi());
}

}  // namespace switchyard::pjrt
