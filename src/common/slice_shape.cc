#include "common/slice_shape.h"

#include <cctype>
#include <cstdint>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/limits.h"

namespace switchyard {

std::string NormalizedKind(absl::string_view name) {
  std::string out;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    }
  }
  return out;
}

bool KindMatches(const SliceShape& shape, absl::string_view device_kind) {
  return shape.kind.empty() || NormalizedKind(device_kind).find(shape.kind) != std::string::npos;
}

absl::StatusOr<SliceShape> ParseSliceShape(absl::string_view text, absl::string_view flag) {
  const size_t colon = text.find(':');
  SliceShape shape;
  shape.kind = NormalizedKind(text.substr(0, colon));
  if (colon == absl::string_view::npos || shape.kind.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "='", text, "' is not GENERATION:TOPOLOGY (e.g. cpu:4, tpuv5e:4x8)"));
  }
  constexpr int64_t kMax = int64_t{limits::kDevicesPerHostMax} * limits::kHostsPerSliceMax;
  int64_t devices = 1;
  for (absl::string_view dim : absl::StrSplit(text.substr(colon + 1), 'x')) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(dim, &value) || value < 1 || value > kMax || devices * value > kMax) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, "='", text,
                       "': the topology must be positive dimensions joined by 'x' (e.g. 4x8), "
                       "at most ",
                       kMax, " devices a slice"));
    }
    devices *= value;
  }
  shape.devices = static_cast<int>(devices);
  return shape;
}

absl::StatusOr<std::vector<SliceShape>> ParseSliceShapes(absl::string_view text,
                                                         absl::string_view flag) {
  std::vector<SliceShape> shapes;
  if (text.empty()) return shapes;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    absl::StatusOr<SliceShape> shape = ParseSliceShape(part, flag);
    if (!shape.ok()) return shape.status();
    shapes.push_back(*std::move(shape));
  }
  return shapes;
}

std::string SliceShapeString(const SliceShape& shape) {
  return absl::StrCat(shape.kind.empty() ? "any" : shape.kind, ":", shape.devices);
}

}  // namespace switchyard
