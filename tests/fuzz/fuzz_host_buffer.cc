// Host-buffer uploads as the client's HostBufferStore RPC delivers them: the metadata
// (session, handle, declared size) and then messages of any bytes, each in two slices,
// read into the buffer as the proxy reads them (proxy/host_buffer_wire.h); readers wait
// on the same buffer meanwhile, and what arrived goes out as a lookup message that must
// parse back to the same bytes.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/time/clock.h"
#include "fuzz/quiet.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/slice.h"
#include "ifrt/grpc_ifrt_service.pb.h"
#include "proxy/host_buffer_store.h"
#include "proxy/host_buffer_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // [length][metadata][chunk lengths and bytes...]
  if (size < 1) return -1;
  const size_t metadata_size = std::min<size_t>(data[0], size - 1);
  ::xla::ifrt::proxy::GrpcHostBufferStoreMetadata metadata;
  if (!metadata.ParseFromArray(data + 1, static_cast<int>(metadata_size))) return -1;
  // The service refuses sizes past the machine's memory; the fuzzer stays far below.
  if (metadata.buffer_size() < 0 || metadata.buffer_size() > (1 << 20)) return 0;
  switchyard::proxy::HostBufferStore store;
  auto buffer = store.Begin(metadata.handle(), metadata.buffer_size());
  if (!buffer.ok()) return 0;
  size_t offset = 1 + metadata_size;
  int64_t received = 0;
  while (offset < size) {
    const size_t n = std::min<size_t>(data[offset], size - offset - 1);
    const std::string bytes(reinterpret_cast<const char*>(data) + offset + 1, n);
    grpc::Slice slices[2] = {grpc::Slice(bytes.substr(0, n / 2)), grpc::Slice(bytes.substr(n / 2))};
    grpc::ByteBuffer message(slices, 2);
    if (switchyard::proxy::AppendStoreChunk(message, **buffer, &received).ok()) {
      (void)(*buffer)->WaitFor(received, absl::Now());
    }
    offset += 1 + n;
  }
  (*buffer)->Finish();
  if (auto all = (*buffer)->WaitAll(absl::Now()); all.ok()) {
    grpc::ByteBuffer out = switchyard::proxy::LookupChunk(*buffer, 0, *all);
    grpc::ProtoBufferReader reader(&out);
    ::xla::ifrt::proxy::GrpcHostBufferLookupResponse response;
    if (!response.ParseFromZeroCopyStream(&reader) || response.data() != *all) std::abort();
  }
  (void)store.Lookup(metadata.handle(), absl::ZeroDuration());
  (void)store.Delete(metadata.handle());
  store.Shutdown();
  return 0;
}
