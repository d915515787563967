#pragma once

// The IFRT `PluginProgram`s that pathwaysutils and Orbax compile (persistence writes
// and reads, profiling, side-channel reshards), parsed from their JSON and checked.
// Pure: nothing here touches a worker.

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "switchyard/common.pb.h"
#include "xla/xla_data.pb.h"

namespace switchyard::proxy {

// IFRT's type names for the program and its compile options.
inline constexpr char kPluginProgram[] = "xla::ifrt::PluginProgram";
inline constexpr char kPluginCompileOptions[] = "xla::ifrt::PluginCompileOptions";

// One array to write or read: the directory it lives in, its name there, and how the
// client's array is (or is to be) laid out over `devices`.
struct PersistedArray {
  std::string location;         // as the client named it: a directory, file://, gs://, s3://
  std::string name;             // one path component
  DType dtype = DTYPE_INVALID;  // reads only: writes take the input's
  std::vector<int64_t> shape;
  switchyard::xla::OpSharding sharding;  // tile entries index into `devices`
  std::vector<int64_t> devices;          // global ids
  absl::Duration timeout = absl::InfiniteDuration();
};

struct PersistenceWrite {
  std::vector<PersistedArray> arrays;  // one per input, in order
};
struct PersistenceRead {
  std::vector<PersistedArray> arrays;  // one per output, in order
};
struct ProfileRequest {
  std::string location;       // where the trace goes
  bool wants_output = false;  // with xprofTraceOptions: one (1,) output, as the client expects
  std::string session_name;
  absl::Duration max_duration = absl::ZeroDuration();  // zero: until stopped
};
struct ReshardTarget {
  std::vector<int64_t> devices;
  switchyard::xla::OpSharding sharding;
  std::string memory_kind;  // empty: the device's default
};
struct ReshardRequest {
  bool donate = false;
  std::vector<ReshardTarget> inputs;
  std::vector<ReshardTarget> outputs;  // one per input
};

using PluginRequest =
    std::variant<PersistenceWrite, PersistenceRead, ProfileRequest, ReshardRequest>;

// Parses a serialized PluginProgram ("__serialized_plugin_program " + JSON). Every
// failure is INVALID_ARGUMENT and begins with "Bad PluginProgram": the client matches
// that text.
absl::StatusOr<PluginRequest> ParsePluginProgram(absl::string_view serialized);

// A short name for logs and the compile response ("persistence write" ...).
std::string PluginRequestName(const PluginRequest& request);

}  // namespace switchyard::proxy
