#pragma once

// The client's large-transfer path (IFRT proxy protocol 17 and later). A jaxlib client
// whose IFRT_PROXY_GRPC_LARGE_TRANSFER_OPTIMIZATION_DIRECTORY names a directory it
// shares with the proxy (the same host: a memory-backed volume of the head pod, or
// /dev/shm) writes each host buffer of at least
// IFRT_PROXY_GRPC_LARGE_TRANSFER_OPTIMIZATION_THRESHOLD_BYTES to a file there, and
// asks the proxy to take it from that file (HostBufferReadFromDisk) instead of
// streaming it over gRPC.

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proxy/host_buffer_store.h"

namespace switchyard::proxy {

// The file a client writes for host buffer `handle`: "lt_" and the handle, which
// jaxlib narrows to a 32-bit signed number on the way.
std::string LargeTransferPath(absl::string_view directory, uint64_t handle);

// A client's file, open and checked, its name already removed (the client reuses
// names, and nothing is left behind whatever happens next).
class LargeTransferFile {
 public:
  // The file at `path`: a regular file, not a link, of exactly `size` bytes. NOT_FOUND
  // without it (the client is on another host, or names another directory),
  // INVALID_ARGUMENT for a file of another size or kind. Removed also when refused.
  static absl::StatusOr<LargeTransferFile> Open(const std::string& path, int64_t size);
  LargeTransferFile(LargeTransferFile&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)), size_(other.size_) {}
  LargeTransferFile& operator=(LargeTransferFile&&) = delete;
  ~LargeTransferFile();

  // Copies the file into `buffer` (of its size) and finishes the buffer.
  absl::Status ReadInto(HostBuffer& buffer);

 private:
  LargeTransferFile(int fd, std::string path, int64_t size)
      : fd_(fd), path_(std::move(path)), size_(size) {}
  int fd_;
  std::string path_;
  int64_t size_;
};

}  // namespace switchyard::proxy
