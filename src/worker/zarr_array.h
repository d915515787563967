#pragma once

// Arrays on storage as zarr (v2) arrays, one chunk per shard: the layout the
// tensorstore-based readers (Orbax's metadata reads, a plain Orbax restore) open. A
// directory holds `.zarray` (shape, chunk shape, dtype; no compressor, C order) and one
// file per chunk, named by its grid index ("1.0"; "0" for a scalar). Edge chunks are
// stored whole, padded. A chunk file that is missing reads as zeros.
// Pure functions over files: no device, no locks.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "switchyard/common.pb.h"

namespace switchyard::worker {

struct ZarrArray {
  DType dtype = DTYPE_INVALID;
  std::vector<int64_t> shape;
  std::vector<int64_t> chunks;  // same rank; each >= 1
};

// zarr's name for `dtype` ("<f4", "bfloat16", "|u1" ...); INVALID_ARGUMENT for types
// zarr has no name for (sub-byte and 8-bit floats, tokens).
absl::StatusOr<std::string> ZarrDType(DType dtype);

// The `.zarray` text.
absl::StatusOr<std::string> ZarrMetadata(const ZarrArray& array);
// Parses a `.zarray`. UNIMPLEMENTED for what this reader does not decode (compressors,
// filters, Fortran order, big-endian types), naming it.
absl::StatusOr<ZarrArray> ParseZarrMetadata(absl::string_view json);

// Writes `dir`/.zarray (creating `dir`). Atomic, as every write here.
absl::Status WriteZarrMetadata(const std::string& dir, const ZarrArray& array);

// Writes the shard [start, start + dims) as its chunk: `start` must be a chunk's origin
// and `dims` that chunk's extent inside the array. `data`: the shard, dense row-major.
absl::Status WriteChunk(const std::string& dir, const ZarrArray& array,
                        absl::Span<const int64_t> start, absl::Span<const int64_t> dims,
                        absl::string_view data);

// Reads the box [start, start + dims) of the array stored in `dir` into `out` (dense,
// row-major), checking that it is a `dtype` array of `shape`: FAILED_PRECONDITION
// naming both when not. NOT_FOUND when `dir` holds no array; DATA_LOSS for a chunk of
// the wrong size.
absl::Status ReadBox(const std::string& dir, DType dtype, absl::Span<const int64_t> shape,
                     absl::Span<const int64_t> start, absl::Span<const int64_t> dims,
                     absl::Span<char> out);

}  // namespace switchyard::worker
