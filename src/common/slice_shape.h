#pragma once

// A slice's shape as Pathways spells it: `GENERATION:TOPOLOGY` ("cpu:4", "tpuv5e:4x8",
// "nvidia-h200:8"). The fleet an operator declares (--instance_type) and the slices a
// session asks for (--virtual_slices) use it; a slice matches when its devices' kind
// contains the generation (letters and digits, lower-case) and it has that many devices.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace switchyard {

struct SliceShape {
  std::string kind;  // normalized (NormalizedKind); empty: any kind
  int devices = 0;   // the topology's product; 0: any number
};

// Letters and digits of `name`, lower-case: "NVIDIA H200" -> "nvidiah200".
std::string NormalizedKind(absl::string_view name);
// Whether a device of `device_kind` is of the shape's kind.
bool KindMatches(const SliceShape& shape, absl::string_view device_kind);
// "cpu:4" -> {cpu, 4}. INVALID_ARGUMENT naming `flag` and what is wrong.
absl::StatusOr<SliceShape> ParseSliceShape(absl::string_view text, absl::string_view flag);
// A comma-separated list; empty text is an empty list.
absl::StatusOr<std::vector<SliceShape>> ParseSliceShapes(absl::string_view text,
                                                         absl::string_view flag);
// "cpu:4" (the topology as its product).
std::string SliceShapeString(const SliceShape& shape);

}  // namespace switchyard
