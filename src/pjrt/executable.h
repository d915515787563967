#pragma once

// A compiled, loaded program on a `Client`'s devices.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pjrt/dtype.h"
#include "pjrt/event.h"

struct PJRT_LoadedExecutable;

namespace switchyard::pjrt {

class Buffer;
class Client;
class ExecuteContext;

struct OutputSpec {
  DType dtype = DType::kInvalid;
  std::vector<int64_t> dims;
};

// What the compiler planned to allocate, in bytes (PJRT's compiled memory stats).
struct CompiledMemoryStats {
  int64_t generated_code = 0;
  int64_t arguments = 0;
  int64_t outputs = 0;
  int64_t alias = 0;
  int64_t temp = 0;
  int64_t host_generated_code = 0;
  int64_t host_arguments = 0;
  int64_t host_outputs = 0;
  int64_t host_alias = 0;
  int64_t host_temp = 0;
  int64_t peak = 0;
};

// What one launch produced: outputs[device][output], and one completion event
// per device (each reports the launch's error, if it failed).
struct Launch {
  std::vector<std::vector<std::unique_ptr<Buffer>>> outputs;
  std::vector<std::unique_ptr<Event>> completions;
};

class Executable {
 public:
  static absl::StatusOr<std::unique_ptr<Executable>> Wrap(const Client* client,
                                                          PJRT_LoadedExecutable* executable);
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  const std::string& name() const { return name_; }
  // Ordinals (in `Client::devices()`) of the devices a launch runs on, in order.
  const std::vector<int>& device_ordinals() const { return device_ordinals_; }
  const std::vector<OutputSpec>& outputs() const { return outputs_; }
  int64_t num_replicas() const { return num_replicas_; }
  int64_t num_partitions() const { return num_partitions_; }

  // Launches on every device; `arguments[d]` are the inputs of device d (in
  // `device_ordinals()` order). Returns once the launch is enqueued. The parts of one
  // launch of a multi-host program share a nonzero `launch_id` on every host.
  // `context` (may be null) reaches the launch's routed custom calls; it must outlive
  // the launch.
  absl::StatusOr<Launch> Execute(const std::vector<std::vector<const Buffer*>>& arguments,
                                 int launch_id = 0, const ExecuteContext* context = nullptr) const;

  // The optimized program as a serialized HloModuleProtoWithConfig
  // ("hlo_with_config"); UNIMPLEMENTED if the plugin does not offer it.
  absl::StatusOr<std::string> OptimizedProgram() const;

  // The compiler's estimates ("flops", "bytes accessed", ...), numbers only;
  // UNIMPLEMENTED if the plugin has none.
  absl::StatusOr<std::vector<std::pair<std::string, double>>> CostAnalysis() const;
  absl::StatusOr<CompiledMemoryStats> MemoryStats() const;

  // Platform-specific bytes for `Client::Deserialize` (same plugin build only).
  absl::StatusOr<std::string> Serialize() const;

 private:
  Executable(const Client* client, PJRT_LoadedExecutable* executable)
      : client_(client), executable_(executable) {}
  absl::Status ReadMetadata();

  const Client* client_;
  PJRT_LoadedExecutable* executable_;
  std::string name_;
  std::vector<int> device_ordinals_;
  std::vector<OutputSpec> outputs_;
  int64_t num_replicas_ = 1;
  int64_t num_partitions_ = 1;
};

}  // namespace switchyard::pjrt
