#include "worker/zarr_array.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/files.h"
#include "common/host_array.h"
#include "common/status_macros.h"
#include "common/wire_numbers.h"
#include "pjrt/dtype.h"

namespace switchyard::worker {
namespace {

using google::protobuf::Value;

struct Named {
  DType dtype;
  const char* name;
};
// Little-endian, as every host Switchyard runs on.
constexpr Named kNames[] = {
    {PRED, "|b1"}, {S8, "|i1"},  {S16, "<i2"},       {S32, "<i4"}, {S64, "<i8"},
    {U8, "|u1"},   {U16, "<u2"}, {U32, "<u4"},       {U64, "<u8"}, {F16, "<f2"},
    {F32, "<f4"},  {F64, "<f8"}, {BF16, "bfloat16"}, {C64, "<c8"}, {C128, "<c16"},
};

int64_t ElementBytes(DType dtype) { return pjrt::HostByteSize(static_cast<pjrt::DType>(dtype), 1); }

std::string Describe(DType dtype, absl::Span<const int64_t> shape) {
  return absl::StrCat(DType_Name(dtype), "[", absl::StrJoin(shape, ","), "]");
}

// "1.0" for grid index (1, 0); "0" for a scalar.
std::string ChunkKey(absl::Span<const int64_t> index) {
  return index.empty() ? "0" : absl::StrJoin(index, ".");
}

absl::StatusOr<std::vector<int64_t>> Dims(const Value& value, absl::string_view what) {
  if (value.kind_case() != Value::kListValue) {
    return absl::InvalidArgumentError(absl::StrCat(".zarray: '", what, "' is not a list"));
  }
  std::vector<int64_t> dims;
  for (const Value& each : value.list_value().values()) {
    const double d = each.number_value();
    if (each.kind_case() != Value::kNumberValue || d < 0 || d > 9.0e15 ||
        d != static_cast<double>(static_cast<int64_t>(d))) {
      return absl::InvalidArgumentError(absl::StrCat(".zarray: '", what, "' holds a bad size"));
    }
    dims.push_back(static_cast<int64_t>(d));
  }
  return dims;
}

// Calls `visit` with the grid index of every chunk overlapping [start, start + dims).
void ForEachChunk(absl::Span<const int64_t> chunks, absl::Span<const int64_t> start,
                  absl::Span<const int64_t> dims,
                  const std::function<void(const std::vector<int64_t>&)>& visit) {
  const size_t rank = chunks.size();
  std::vector<int64_t> first(rank), last(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (dims[d] == 0) return;
    first[d] = start[d] / chunks[d];
    last[d] = (start[d] + dims[d] - 1) / chunks[d];
  }
  std::vector<int64_t> index = first;
  while (true) {
    visit(index);
    size_t d = rank;
    while (d > 0) {
      --d;
      if (++index[d] <= last[d]) break;
      index[d] = first[d];
      if (d == 0) return;
    }
    if (rank == 0) return;
  }
}

}  // namespace

absl::StatusOr<std::string> ZarrDType(DType dtype) {
  for (const Named& named : kNames) {
    if (named.dtype == dtype) return std::string(named.name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("element type ", DType_Name(dtype), " has no zarr name: it cannot be stored"));
}

absl::StatusOr<std::string> ZarrMetadata(const ZarrArray& array) {
  SY_ASSIGN_OR_RETURN(std::string dtype, ZarrDType(array.dtype));
  if (array.chunks.size() != array.shape.size()) {
    return absl::InvalidArgumentError("chunk shape and array shape differ in rank");
  }
  return absl::StrCat(R"({"zarr_format":2,"shape":[)", absl::StrJoin(array.shape, ","),
                      R"(],"chunks":[)", absl::StrJoin(array.chunks, ","), R"(],"dtype":")", dtype,
                      R"(","compressor":null,"fill_value":null,"order":"C","filters":null,)"
                      R"("dimension_separator":"."})");
}

absl::StatusOr<ZarrArray> ParseZarrMetadata(absl::string_view json) {
  google::protobuf::Struct metadata;
  auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &metadata);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(".zarray is not JSON: ", parsed.ToString()));
  }
  const auto& fields = metadata.fields();
  auto field = [&](const std::string& name) -> const Value* {
    auto it = fields.find(name);
    return it == fields.end() ? nullptr : &it->second;
  };
  const Value* format = field("zarr_format");
  if (format == nullptr || format->number_value() != 2) {
    return absl::UnimplementedError(".zarray: not a zarr v2 array");
  }
  for (const char* absent : {"compressor", "filters"}) {
    const Value* value = field(absent);
    if (value != nullptr && value->kind_case() != Value::kNullValue) {
      return absl::UnimplementedError(
          absl::StrCat(".zarray: the array has a ", absent,
                       "; Switchyard reads only uncompressed arrays (as it writes them)"));
    }
  }
  if (const Value* order = field("order"); order != nullptr && order->string_value() != "C") {
    return absl::UnimplementedError(".zarray: only C order is read");
  }
  if (const Value* separator = field("dimension_separator");
      separator != nullptr && separator->string_value() != ".") {
    return absl::UnimplementedError(".zarray: only '.' as the dimension separator is read");
  }
  ZarrArray array;
  const Value* dtype = field("dtype");
  std::string name = dtype == nullptr ? "" : dtype->string_value();
  if (name.size() > 1 && name[0] == '=') name[0] = '<';
  for (const Named& named : kNames) {
    if (name == named.name || (name.size() > 1 && name.substr(1) == named.name + 1 &&
                               (name[0] == '<' || name[0] == '|'))) {
      array.dtype = named.dtype;
    }
  }
  if (array.dtype == DTYPE_INVALID) {
    return absl::UnimplementedError(
        absl::StrCat(".zarray: element type '", name.substr(0, 32), "' is not read"));
  }
  const Value* shape = field("shape");
  const Value* chunks = field("chunks");
  if (shape == nullptr || chunks == nullptr) {
    return absl::InvalidArgumentError(".zarray: no shape or chunks");
  }
  SY_ASSIGN_OR_RETURN(array.shape, Dims(*shape, "shape"));
  SY_ASSIGN_OR_RETURN(array.chunks, Dims(*chunks, "chunks"));
  if (array.chunks.size() != array.shape.size()) {
    return absl::InvalidArgumentError(".zarray: chunks and shape differ in rank");
  }
  for (int64_t c : array.chunks) {
    if (c < 1) return absl::InvalidArgumentError(".zarray: a chunk size below 1");
  }
  SY_RETURN_IF_ERROR(CheckedElements(array.shape, ".zarray shape").status());
  SY_RETURN_IF_ERROR(CheckedElements(array.chunks, ".zarray chunks").status());
  return array;
}

absl::Status WriteZarrMetadata(const std::string& dir, const ZarrArray& array) {
  SY_ASSIGN_OR_RETURN(std::string text, ZarrMetadata(array));
  SY_RETURN_IF_ERROR(MakeDirectories(dir));
  return WriteFileAtomically(absl::StrCat(dir, "/.zarray"), text);
}

absl::Status WriteChunk(const std::string& dir, const ZarrArray& array,
                        absl::Span<const int64_t> start, absl::Span<const int64_t> dims,
                        absl::string_view data) {
  const size_t rank = array.shape.size();
  if (start.size() != rank || dims.size() != rank || array.chunks.size() != rank) {
    return absl::InvalidArgumentError("a shard of another rank than its array");
  }
  std::vector<int64_t> index(rank);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t extent = std::min(array.chunks[d], array.shape[d] - start[d]);
    if (start[d] % array.chunks[d] != 0 || start[d] >= std::max<int64_t>(array.shape[d], 1) ||
        dims[d] != std::max<int64_t>(extent, 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the shard at [", absl::StrJoin(start, ","), "] of shape [", absl::StrJoin(dims, ","),
          "] is not a chunk of ", Describe(array.dtype, array.shape), " in chunks of [",
          absl::StrJoin(array.chunks, ","), "]"));
    }
    index[d] = start[d] / array.chunks[d];
  }
  const int64_t element = ElementBytes(array.dtype);
  const std::vector<int64_t> shard(dims.begin(), dims.end());
  if (static_cast<int64_t>(data.size()) != NumElements(shard) * element) {
    return absl::InvalidArgumentError("the shard's bytes do not match its shape");
  }
  SY_RETURN_IF_ERROR(MakeDirectories(dir));
  const std::string path = absl::StrCat(dir, "/", ChunkKey(index));
  if (shard == array.chunks) return WriteFileAtomically(path, data);
  // An edge chunk: stored whole, the part outside the array zero.
  std::string padded(NumElements(array.chunks) * element, '\0');
  IndexDomain domain{std::vector<int64_t>(rank, 0), shard};
  SY_RETURN_IF_ERROR(InsertShard(data, array.chunks, {}, element, domain, absl::MakeSpan(padded)));
  return WriteFileAtomically(path, padded);
}

absl::Status ReadBox(const std::string& dir, DType dtype, absl::Span<const int64_t> shape,
                     absl::Span<const int64_t> start, absl::Span<const int64_t> dims,
                     absl::Span<char> out) {
  absl::StatusOr<std::string> text = ReadWholeFile(absl::StrCat(dir, "/.zarray"));
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(absl::StrCat("no array is stored in ", dir, " (no .zarray)"));
  }
  SY_RETURN_IF_ERROR(text.status());
  absl::StatusOr<ZarrArray> stored = ParseZarrMetadata(*text);
  if (!stored.ok()) {
    return absl::Status(stored.status().code(), absl::StrCat(dir, ": ", stored.status().message()));
  }
  const std::vector<int64_t> wanted(shape.begin(), shape.end());
  if (stored->dtype != dtype || stored->shape != wanted) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " holds ", Describe(stored->dtype, stored->shape), "; the read asks for ",
                     Describe(dtype, shape)));
  }
  const size_t rank = wanted.size();
  if (start.size() != rank || dims.size() != rank) {
    return absl::InvalidArgumentError("a box of another rank than its array");
  }
  for (size_t d = 0; d < rank; ++d) {
    if (start[d] < 0 || dims[d] < 0 || start[d] + dims[d] > wanted[d]) {
      return absl::InvalidArgumentError("a box outside its array");
    }
  }
  const int64_t element = ElementBytes(dtype);
  const std::vector<int64_t> box(dims.begin(), dims.end());
  if (static_cast<int64_t>(out.size()) != NumElements(box) * element) {
    return absl::InvalidArgumentError("the output does not match the box");
  }
  const int64_t chunk_bytes = NumElements(stored->chunks) * element;
  absl::Status status;
  ForEachChunk(stored->chunks, start, dims, [&](const std::vector<int64_t>& index) {
    if (!status.ok()) return;
    // The part of this chunk inside the box: relative to the chunk and to the box.
    IndexDomain in_chunk, in_box;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t origin = index[d] * stored->chunks[d];
      const int64_t lo = std::max(origin, start[d]);
      const int64_t hi = std::min(origin + stored->chunks[d], start[d] + dims[d]);
      in_chunk.start.push_back(lo - origin);
      in_chunk.limit.push_back(hi - origin);
      in_box.start.push_back(lo - start[d]);
      in_box.limit.push_back(hi - start[d]);
    }
    const std::string path = absl::StrCat(dir, "/", ChunkKey(index));
    // The box is this whole chunk (a restore onto the sharding saved): straight in.
    const bool whole = in_chunk.shape() == stored->chunks && in_box.shape() == box;
    std::string chunk(whole ? 0 : chunk_bytes, '\0');
    status = ReadFileInto(path, whole ? out : absl::MakeSpan(chunk));
    if (absl::IsNotFound(status)) {
      status = absl::OkStatus();
      if (whole) std::memset(out.data(), 0, out.size());
    } else if (absl::IsOutOfRange(status)) {
      status = absl::DataLossError(absl::StrCat(status.message(), ": the chunk is damaged"));
    }
    if (!status.ok() || whole) return;
    absl::StatusOr<std::string> piece = ExtractShard(chunk, stored->chunks, {}, element, in_chunk);
    if (!piece.ok()) {
      status = piece.status();
      return;
    }
    status = InsertShard(*piece, box, {}, element, in_box, out);
  });
  return status;
}

}  // namespace switchyard::worker
