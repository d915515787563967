#pragma once

// XLA's dimension orders (a layout's minor_to_major): the default one, and whether an
// order is it. Shared by the plugin wrappers, the worker and the proxy.

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace switchyard {

// {rank-1, ..., 0}: major-to-minor, as hosts and numpy hold arrays.
inline std::vector<int64_t> MajorToMinor(size_t rank) {
  std::vector<int64_t> minor_to_major(rank);
  for (size_t i = 0; i < rank; ++i) minor_to_major[i] = static_cast<int64_t>(rank - 1 - i);
  return minor_to_major;
}

inline bool IsMajorToMinor(absl::Span<const int64_t> minor_to_major) {
  for (size_t i = 0; i < minor_to_major.size(); ++i) {
    if (minor_to_major[i] != static_cast<int64_t>(minor_to_major.size() - 1 - i)) return false;
  }
  return true;
}

}  // namespace switchyard
