#pragma once

// Dense host arrays cut into shards and put back together. A host array is laid out
// row-major, or by the client's byte strides (numpy's), in which case its bytes are
// the minimal region: from element 0 to the last element. Pure functions.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace switchyard {

// The half-open box [start, limit) of an array that a shard holds.
struct IndexDomain {
  std::vector<int64_t> start;
  std::vector<int64_t> limit;

  std::vector<int64_t> shape() const;
  bool operator==(const IndexDomain& other) const {
    return start == other.start && limit == other.limit;
  }
};

int64_t NumElements(const std::vector<int64_t>& shape);

// Checks strides (empty means dense) against the shape and returns the size in bytes of
// the minimal region. UNIMPLEMENTED for negative or unaligned strides.
absl::StatusOr<int64_t> HostRegionBytes(const std::vector<int64_t>& shape,
                                        const std::vector<int64_t>& byte_strides,
                                        int64_t element_bytes);

// The strides, or none when they are those of the dense row-major layout (what numpy
// gives a C-contiguous array, and what some clients send): both say the same bytes, and
// none lets them go on as they are, without a gather.
std::vector<int64_t> DropDenseStrides(std::vector<int64_t> byte_strides,
                                      const std::vector<int64_t>& shape, int64_t element_bytes);

// Copies `domain` of the host array into a dense row-major buffer.
absl::StatusOr<std::string> ExtractShard(absl::string_view host, const std::vector<int64_t>& shape,
                                         const std::vector<int64_t>& byte_strides,
                                         int64_t element_bytes, const IndexDomain& domain);

// Copies a dense row-major shard into `domain` of the host array, whose region
// (`HostRegionBytes`) `host` must span.
absl::Status InsertShard(absl::string_view shard, const std::vector<int64_t>& shape,
                         const std::vector<int64_t>& byte_strides, int64_t element_bytes,
                         const IndexDomain& domain, absl::Span<char> host);

}  // namespace switchyard
