#include "proxy/host_buffer_wire.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/slice.h"

namespace switchyard::proxy {
namespace {

using google::protobuf::internal::WireFormatLite;

constexpr int kDataField = 1;
const uint32_t kDataTag =
    WireFormatLite::MakeTag(kDataField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);

absl::Status NotAChunk(const char* why) {
  return absl::InvalidArgumentError(
      absl::StrCat("a HostBufferStore message is not a GrpcHostBufferStoreRequest (", why, ")"));
}

}  // namespace

absl::Status AppendStoreChunk(grpc::ByteBuffer& message, HostBuffer& buffer, int64_t* received) {
  grpc::ProtoBufferReader reader(&message);
  if (!reader.status().ok()) return NotAChunk("unreadable bytes");
  google::protobuf::io::CodedInputStream input(&reader);
  bool seen = false;
  while (uint32_t tag = input.ReadTag()) {
    if (tag != kDataTag) {
      // Unknown fields are allowed, as protobuf's own parse allows them.
      if (!WireFormatLite::SkipField(&input, tag)) return NotAChunk("truncated field");
      continue;
    }
    // A second data field would replace the first in protobuf's parse; no client sends it.
    if (seen) return NotAChunk("data twice");
    seen = true;
    uint32_t length = 0;
    if (!input.ReadVarint32(&length)) return NotAChunk("truncated length");
    // The bytes as they lie in the received slices, appended piece by piece.
    while (length > 0) {
      const void* piece = nullptr;
      int size = 0;
      if (!input.GetDirectBufferPointer(&piece, &size) || size <= 0) {
        return NotAChunk("truncated data");
      }
      const int take = std::min<int64_t>(size, length);
      if (absl::Status appended = buffer.Append(
              absl::string_view(static_cast<const char*>(piece), static_cast<size_t>(take)));
          !appended.ok()) {
        return appended;
      }
      input.Skip(take);
      length -= take;
      *received += take;
    }
  }
  if (!input.ConsumedEntireMessage()) return NotAChunk("malformed tag");
  return absl::OkStatus();
}

grpc::ByteBuffer LookupChunk(std::shared_ptr<const HostBuffer> owner, int64_t offset,
                             absl::string_view bytes) {
  // The tag and the length, as protobuf writes them before a bytes field's contents.
  uint8_t header_bytes[1 + 10];  // a one-byte tag, a varint of at most 10
  uint8_t* end = google::protobuf::io::CodedOutputStream::WriteTagToArray(kDataTag, header_bytes);
  end = google::protobuf::io::CodedOutputStream::WriteVarint64ToArray(bytes.size(), end);
  const std::string header(reinterpret_cast<const char*>(header_bytes), end - header_bytes);
  if (bytes.empty()) {
    grpc::Slice only(header);
    return grpc::ByteBuffer(&only, 1);
  }
  // gRPC lets go of the slice once its bytes are written: a windowed buffer then lets
  // go of them too (HostBuffer::Sent).
  struct Kept {
    std::shared_ptr<const HostBuffer> owner;
    int64_t offset;
    int64_t end;
    static void Release(void* opaque) {
      auto* kept = static_cast<Kept*>(opaque);
      kept->owner->Sent(kept->offset, kept->end);
      delete kept;
    }
  };
  auto* kept = new Kept{std::move(owner), offset, offset + static_cast<int64_t>(bytes.size())};
  grpc::Slice slices[2] = {grpc::Slice(header), grpc::Slice(const_cast<char*>(bytes.data()),
                                                            bytes.size(), &Kept::Release, kept)};
  return grpc::ByteBuffer(slices, 2);
}

}  // namespace switchyard::proxy
