#pragma once

// Buffers made from pieces of other buffers: local copies, and pulls from peer
// workers (bytes go worker to worker, streamed in chunks). Thread-safe.

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/host_bytes.h"
#include "pjrt/client.h"
#include "switchyard/worker.grpc.pb.h"
#include "worker/buffer_store.h"
#include "worker/device_map.h"
#include "worker/stream_progress.h"

namespace switchyard::worker {

// Checks a header from the wire; returns the dense byte size it implies.
absl::StatusOr<int64_t> CheckHeader(const BufferHeader& header);

class Transfers {
 public:
  Transfers(const pjrt::Client* client, const DeviceMap* devices, BufferStore* buffers,
            StreamProgress* progress)
      : client_(client), devices_(devices), buffers_(buffers), progress_(progress) {}

  void SetOwnAddress(std::string address) ABSL_LOCKS_EXCLUDED(mutex_);

  // Builds the buffer for `owner`; on failure stores the error under its id and
  // returns it. A source on a peer that cannot be reached is DATA_LOSS.
  absl::Status Assemble(const AssembleBufferRequest& request, uint64_t owner = 0)
      ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  struct Source {
    std::vector<int64_t> dims;
    std::shared_ptr<HostBytes> bytes;
  };
  absl::Status Build(const AssembleBufferRequest& request, uint64_t owner);
  absl::StatusOr<Source> Fetch(const BufferPiece& piece);
  Worker::Stub* Peer(const std::string& address) ABSL_LOCKS_EXCLUDED(mutex_);

  const pjrt::Client* client_;
  const DeviceMap* devices_;
  BufferStore* buffers_;
  StreamProgress* progress_;
  absl::Mutex mutex_;
  std::string own_address_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, std::unique_ptr<Worker::Stub>> peers_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace switchyard::worker
