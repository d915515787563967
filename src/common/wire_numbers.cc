#include "common/wire_numbers.h"

#include "absl/strings/str_cat.h"
#include "common/limits.h"

namespace switchyard {

absl::StatusOr<int64_t> CheckedProduct(int64_t a, int64_t b, int64_t max, absl::string_view what) {
  if (a < 0 || b < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": negative factor (", a, " x ", b, ")"));
  }
  // a * b > max  <=>  a > max / b, for b > 0: no product is formed before the check.
  if (b != 0 && a > max / b) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", a, " x ", b, " exceeds the limit of ", max));
  }
  return a * b;
}

absl::StatusOr<int64_t> CheckedElements(absl::Span<const int64_t> dims, absl::string_view what) {
  if (dims.size() > static_cast<size_t>(limits::kArrayRankMax)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": rank ", dims.size(), " exceeds the limit of ", limits::kArrayRankMax));
  }
  int64_t elements = 1;
  for (int64_t dim : dims) {
    if (dim < 0)
      return absl::InvalidArgumentError(absl::StrCat(what, ": negative dimension ", dim));
    absl::StatusOr<int64_t> product =
        CheckedProduct(elements, dim, limits::kArrayElementsMax, what);
    if (!product.ok()) return product.status();
    elements = *product;
  }
  return elements;
}

absl::StatusOr<int64_t> CheckedTiles(absl::Span<const int64_t> dims, int64_t max,
                                     absl::string_view what) {
  int64_t tiles = 1;
  for (int64_t dim : dims) {
    if (dim < 1) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": dimension ", dim, " is below 1"));
    }
    absl::StatusOr<int64_t> product = CheckedProduct(tiles, dim, max, what);
    if (!product.ok()) return product.status();
    tiles = *product;
  }
  return tiles;
}

absl::Status CheckIndex(int64_t index, int64_t size, absl::string_view what) {
  if (index < 0 || index >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", index, " is out of range [0, ", size, ")"));
  }
  return absl::OkStatus();
}

}  // namespace switchyard
