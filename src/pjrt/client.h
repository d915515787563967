#pragma once

// A PJRT client: the plugin's devices and memories, host-to-device transfers,
// compilation and executable deserialization. Thread-safe, like the PJRT client.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/host_bytes.h"
#include "pjrt/dtype.h"
#include "pjrt/key_value_store.h"
#include "pjrt/plugin.h"

struct PJRT_Client;
struct PJRT_Event;
struct PJRT_Device;
struct PJRT_Memory;

namespace switchyard::pjrt {

class Buffer;
class Executable;

struct MemoryDesc {
  int id = 0;
  std::string kind;  // "device", "pinned_host", "unpinned_host"
};

struct DeviceDesc {
  int ordinal = 0;  // index in `Client::devices()`
  int id = 0;       // the plugin's device id (used in device assignments)
  int local_hardware_id = 0;
  std::string kind;
  std::vector<MemoryDesc> memories;
  std::string default_memory_kind;
};

class Client {
 public:
  // `kv_store` (may be null; must outlive the client) backs the plugin's kv
  // callbacks, which multi-host clients need.
  static absl::StatusOr<std::unique_ptr<Client>> Create(const Plugin* plugin,
                                                        const std::vector<ClientOption>& options,
                                                        KeyValueStore* kv_store = nullptr);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Plugin& plugin() const { return *plugin_; }
  const std::string& platform_name() const { return platform_name_; }
  const std::string& platform_version() const { return platform_version_; }
  // The addressable devices, in the plugin's order.
  const std::vector<DeviceDesc>& devices() const { return devices_; }

  // Copies a dense, major-to-minor host array to device `ordinal` (to its memory
  // of `memory_kind`; empty: the default memory), in the device layout of dimension
  // order `device_minor_to_major` (empty: the plugin's default); returns once the host
  // bytes are no longer needed. INVALID_ARGUMENT if `data` does not match `dtype` x
  // `dims`, the ordinal is out of range or the device has no such memory.
  absl::StatusOr<std::unique_ptr<Buffer>> BufferFromHost(
      absl::Span<const char> data, DType dtype, absl::Span<const int64_t> dims, int ordinal,
      const std::string& memory_kind = "",
      absl::Span<const int64_t> device_minor_to_major = {}) const;
  // The same for bytes handed over: the plugin may use them in place instead of
  // copying (the CPU plugin does, for aligned data) and they are freed once it no
  // longer needs them. Returns once the buffer exists.
  absl::StatusOr<std::unique_ptr<Buffer>> BufferFromOwnedHost(
      std::shared_ptr<const HostBytes> data, DType dtype, absl::Span<const int64_t> dims,
      int ordinal, const std::string& memory_kind = "") const;

  // Compiles `program` (format "mlir": StableHLO text, bytecode or a VHLO portable
  // artifact; "hlo": a serialized HloModuleProto) with a serialized CompileOptionsProto.
  absl::StatusOr<std::unique_ptr<Executable>> Compile(absl::Span<const char> program,
                                                      const std::string& format,
                                                      absl::Span<const char> compile_options) const;

  // Loads an executable produced by `Executable::Serialize` of the same plugin build.
  absl::StatusOr<std::unique_ptr<Executable>> Deserialize(absl::Span<const char> bytes) const;

  // For the other wrappers in this component.
  const PJRT_Api* api() const { return plugin_->api(); }
  int OrdinalOf(const PJRT_Device* device) const;
  PJRT_Device* device_handle(int ordinal) const { return device_handles_[ordinal]; }

 private:
  Client(const Plugin* plugin, PJRT_Client* client) : plugin_(plugin), client_(client) {}
  // Starts the transfer; `*done_with_data` is then the event that says when the plugin
  // no longer reads `data` (nullptr on errors before the transfer started).
  absl::StatusOr<std::unique_ptr<Buffer>> StartBufferFromHost(
      absl::Span<const char> data, DType dtype, absl::Span<const int64_t> dims, int ordinal,
      const std::string& memory_kind, absl::Span<const int64_t> device_minor_to_major,
      bool zero_copy, PJRT_Event** done_with_data) const;
  absl::Status ReadDevices();

  const Plugin* plugin_;
  PJRT_Client* client_;
  std::string platform_name_;
  std::string platform_version_;
  std::vector<DeviceDesc> devices_;
  std::vector<PJRT_Device*> device_handles_;
  std::vector<std::vector<PJRT_Memory*>> memory_handles_;  // parallel to DeviceDesc::memories
};

}  // namespace switchyard::pjrt
