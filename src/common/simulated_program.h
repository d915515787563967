#pragma once

// What a simulated host (a worker started with --simulate: a PJRT plugin with no device
// behind it) compiles in place of a program: the metadata a real compile of the same
// program produced on another worker, and which of its devices run it. The proxy writes
// it; the simulated plugin reads it. Pure functions.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace switchyard {

// The PJRT program format of an encoded SimulatedProgram.
inline constexpr char kSimulatedProgramFormat[] = "switchyard_simulated";

struct SimulatedProgram {
  struct Output {
    int dtype = 0;  // switchyard.DType (XLA's PrimitiveType numbers)
    std::vector<int64_t> dims;
    bool operator==(const Output&) const = default;
  };
  std::string name;
  int64_t num_replicas = 1;
  int64_t num_partitions = 1;
  std::vector<int> device_ordinals;  // the simulated host's devices, in launch order
  std::vector<Output> outputs;       // of each device
  bool operator==(const SimulatedProgram&) const = default;
};

// A few lines of text ("name ...", "devices 0,1", "output 11 2,3", ...).
std::string EncodeSimulatedProgram(const SimulatedProgram& program);
// INVALID_ARGUMENT for anything EncodeSimulatedProgram would not write, or past the
// bounds of limits.h (devices, outputs, rank).
absl::StatusOr<SimulatedProgram> DecodeSimulatedProgram(absl::string_view text);

}  // namespace switchyard
