#include "common/host_array.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/copy_count.h"
#include "common/limits.h"
#include "common/wire_numbers.h"

namespace switchyard {
namespace {

std::vector<int64_t> DenseStrides(const std::vector<int64_t>& shape, int64_t element_bytes) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = element_bytes;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= shape[d];
  }
  return strides;
}

// Calls `copy(host_offset, shard_offset, bytes)` for every contiguous run of `domain`.
template <typename Copy>
absl::Status ForEachRun(const std::vector<int64_t>& shape, const std::vector<int64_t>& byte_strides,
                        int64_t element_bytes, const IndexDomain& domain, Copy copy) {
  const size_t rank = shape.size();
  if (domain.start.size() != rank || domain.limit.size() != rank) {
    return absl::InvalidArgumentError("shard domain rank differs from the array's");
  }
  for (size_t d = 0; d < rank; ++d) {
    if (domain.start[d] < 0 || domain.start[d] > domain.limit[d] || domain.limit[d] > shape[d]) {
      return absl::InvalidArgumentError("shard domain outside the array");
    }
  }
  const std::vector<int64_t> strides =
      byte_strides.empty() ? DenseStrides(shape, element_bytes) : byte_strides;
  const std::vector<int64_t> shard_shape = domain.shape();
  if (NumElements(shard_shape) == 0) return absl::OkStatus();
  if (rank == 0) {
    copy(0, 0, element_bytes);
    return absl::OkStatus();
  }
  // The innermost dimension is one run when it is contiguous in the host array.
  const bool inner_contiguous = strides[rank - 1] == element_bytes;
  const int64_t run_elements = inner_contiguous ? shard_shape[rank - 1] : 1;
  const int64_t run_bytes = run_elements * element_bytes;
  std::vector<int64_t> index(rank, 0);  // position within the shard
  int64_t shard_offset = 0;
  while (true) {
    int64_t host_offset = 0;
    for (size_t d = 0; d < rank; ++d) host_offset += (domain.start[d] + index[d]) * strides[d];
    copy(host_offset, shard_offset, run_bytes);
    shard_offset += run_bytes;
    // Advance the odometer; the innermost dimension moves by a whole run.
    int d = static_cast<int>(rank) - 1;
    index[d] += run_elements;
    while (d > 0 && index[d] >= shard_shape[d]) {
      index[d] = 0;
      ++index[--d];
    }
    if (index[0] >= shard_shape[0]) break;
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<int64_t> IndexDomain::shape() const {
  std::vector<int64_t> out(start.size());
  for (size_t d = 0; d < start.size(); ++d) out[d] = limit[d] - start[d];
  return out;
}

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

std::vector<int64_t> DropDenseStrides(std::vector<int64_t> byte_strides,
                                      const std::vector<int64_t>& shape, int64_t element_bytes) {
  if (byte_strides.size() != shape.size() || element_bytes <= 0) return byte_strides;
  int64_t dense = element_bytes;
  for (size_t i = shape.size(); i-- > 0;) {
    // A dimension of extent 1 is never stepped along: any stride says the same bytes.
    if (shape[i] != 1 && byte_strides[i] != dense) return byte_strides;
    if (__builtin_mul_overflow(dense, shape[i], &dense)) return byte_strides;
  }
  return {};
}

absl::StatusOr<int64_t> HostRegionBytes(const std::vector<int64_t>& shape,
                                        const std::vector<int64_t>& byte_strides,
                                        int64_t element_bytes) {
  if (element_bytes <= 0) {
    // Tokens and sub-byte types: no byte-addressed host layout.
    return absl::InvalidArgumentError("arrays of this element type have no host layout");
  }
  const int64_t elements = NumElements(shape);
  if (byte_strides.empty() || elements == 0) return elements * element_bytes;
  if (byte_strides.size() != shape.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte_strides [", absl::StrJoin(byte_strides, ","),
                     "] do not match the rank of [", absl::StrJoin(shape, ","), "]"));
  }
  int64_t last = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;  // a stride of a size-1 dimension is never used
    if (byte_strides[d] <= 0 || byte_strides[d] % element_bytes != 0) {
      return absl::UnimplementedError(
          absl::StrCat("byte_strides [", absl::StrJoin(byte_strides, ","),
                       "] must be positive multiples of the element size ", element_bytes));
    }
    // Strides come from the client: every step is checked, so the region's size (and
    // every offset inside it) fits.
    absl::StatusOr<int64_t> span =
        CheckedProduct(byte_strides[d], shape[d] - 1, limits::kHostRegionBytesMax, "byte strides");
    if (!span.ok()) return span.status();
    if (*span > limits::kHostRegionBytesMax - last - element_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("byte_strides [", absl::StrJoin(byte_strides, ","), "] span more than ",
                       limits::kHostRegionBytesMax, " bytes"));
    }
    last += *span;
  }
  return last + element_bytes;
}

absl::StatusOr<std::string> ExtractShard(absl::string_view host, const std::vector<int64_t>& shape,
                                         const std::vector<int64_t>& byte_strides,
                                         int64_t element_bytes, const IndexDomain& domain) {
  absl::StatusOr<int64_t> region = HostRegionBytes(shape, byte_strides, element_bytes);
  if (!region.ok()) return region.status();
  if (static_cast<int64_t>(host.size()) != *region) {
    return absl::InvalidArgumentError(
        absl::StrCat("host buffer has ", host.size(), " bytes; the array needs ", *region));
  }
  std::string out(NumElements(domain.shape()) * element_bytes, '\0');
  absl::Status status =
      ForEachRun(shape, byte_strides, element_bytes, domain,
                 [&](int64_t host_offset, int64_t shard_offset, int64_t bytes) {
                   std::memcpy(out.data() + shard_offset, host.data() + host_offset, bytes);
                 });
  if (!status.ok()) return status;
  CountCopied(out.size());
  return out;
}

absl::Status InsertShard(absl::string_view shard, const std::vector<int64_t>& shape,
                         const std::vector<int64_t>& byte_strides, int64_t element_bytes,
                         const IndexDomain& domain, absl::Span<char> host) {
  if (element_bytes <= 0) {
    return absl::InvalidArgumentError("arrays of this element type have no host layout");
  }
  if (static_cast<int64_t>(shard.size()) != NumElements(domain.shape()) * element_bytes) {
    return absl::InternalError("shard size does not match its domain");
  }
  absl::StatusOr<int64_t> region = HostRegionBytes(shape, byte_strides, element_bytes);
  if (!region.ok()) return region.status();
  if (static_cast<int64_t>(host.size()) != *region) {
    return absl::InternalError("host array size does not match its shape and strides");
  }
  CountCopied(shard.size());
  return ForEachRun(shape, byte_strides, element_bytes, domain,
                    [&](int64_t host_offset, int64_t shard_offset, int64_t bytes) {
                      std::memcpy(host.data() + host_offset, shard.data() + shard_offset, bytes);
                    });
}

}  // namespace switchyard
