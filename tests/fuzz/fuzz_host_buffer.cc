// Host-buffer uploads as the client's HostBufferStore RPC delivers them: the metadata
// (session, handle, declared size) and then chunks of any size, short, long or failed;
// readers wait on the same buffer meanwhile.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/time/clock.h"
#include "fuzz/quiet.h"
#include "ifrt/grpc_ifrt_service.pb.h"
#include "proxy/host_buffer_store.h"

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
  while (offset < size) {
    const size_t n = std::min<size_t>(data[offset], size - offset - 1);
    if ((*buffer)
            ->Append(absl::string_view(reinterpret_cast<const char*>(data) + offset + 1, n))
            .ok()) {
      (void)(*buffer)->WaitFor(static_cast<int64_t>(n), absl::Now());
    }
    offset += 1 + n;
  }
  (*buffer)->Finish();
  (void)(*buffer)->WaitAll(absl::Now());
  (void)store.Lookup(metadata.handle(), absl::ZeroDuration());
  (void)store.Delete(metadata.handle());
  store.Shutdown();
  return 0;
}
