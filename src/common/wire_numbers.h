#pragma once

// Every number a peer sends is checked here before it is used: dimensions and their
// products, counts and indices. A product of two wire numbers is never computed
// unchecked, so no request can overflow, index out of bounds or make an allocation
// throw. Errors are INVALID_ARGUMENT (or RESOURCE_EXHAUSTED for sizes over a limit)
// and name `what`.

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace switchyard {

// `a * b` for non-negative factors; INVALID_ARGUMENT when negative or above `max`.
absl::StatusOr<int64_t> CheckedProduct(int64_t a, int64_t b, int64_t max, absl::string_view what);

// The element count of an array with these dimensions: each non-negative, at most
// limits::kArrayRankMax of them, and the product within limits::kArrayElementsMax.
absl::StatusOr<int64_t> CheckedElements(absl::Span<const int64_t> dims, absl::string_view what);

// Dimensions as a validated vector (`CheckedElements` holds for them).
template <typename Repeated>
absl::StatusOr<std::vector<int64_t>> CheckedShape(const Repeated& dims, absl::string_view what) {
  std::vector<int64_t> out(dims.begin(), dims.end());
  absl::StatusOr<int64_t> elements = CheckedElements(out, what);
  if (!elements.ok()) return elements.status();
  return out;
}

// The product of tile or mesh dimensions: each at least 1, at most `max` in all.
absl::StatusOr<int64_t> CheckedTiles(absl::Span<const int64_t> dims, int64_t max,
                                     absl::string_view what);

// OK when 0 <= index < size.
absl::Status CheckIndex(int64_t index, int64_t size, absl::string_view what);

}  // namespace switchyard
