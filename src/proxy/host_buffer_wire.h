#pragma once

// The messages of the host-buffer RPCs (HostBufferStore, HostBufferLookup), read and
// written straight between gRPC's slices and a HostBuffer's memory: an upload's chunk
// goes from the received slices into the buffer in one copy (no parsed message in
// between), and a fetched chunk goes out as a slice that points into the buffer (no copy
// into a message, none to serialize it). The messages are those of
// proto/ifrt/grpc_ifrt_service.proto: `bytes data = 1`.

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/byte_buffer.h"
#include "proxy/host_buffer_store.h"

namespace switchyard::proxy {

// Appends the data of one GrpcHostBufferStoreRequest, `message`, to `buffer` and adds
// its size to `*received`. INVALID_ARGUMENT for bytes that are not such a message (or
// hold its data twice); the buffer's own error (DATA_LOSS past its declared size).
absl::Status AppendStoreChunk(grpc::ByteBuffer& message, HostBuffer& buffer, int64_t* received);

// A GrpcHostBufferLookupResponse whose data is `bytes`, which lie in `owner`'s memory
// from `offset` on: the message refers to them, keeps `owner` until gRPC has sent it,
// and then tells it so (HostBuffer::Sent).
grpc::ByteBuffer LookupChunk(std::shared_ptr<const HostBuffer> owner, int64_t offset,
                             absl::string_view bytes);

}  // namespace switchyard::proxy
