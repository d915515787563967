#pragma once

// Buffers made from pieces of other buffers: local copies, and pulls from peer
// workers (bytes go worker to worker, streamed in chunks). Thread-safe.

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/bulk_tickets.h"
#include "common/host_bytes.h"
#include "pjrt/client.h"
#include "switchyard/worker.grpc.pb.h"
#include "worker/buffer_store.h"
#include "worker/device_map.h"
#include "worker/stream_progress.h"

namespace switchyard::worker {

// Checks a header from the wire; returns the dense byte size it implies.
absl::StatusOr<int64_t> CheckHeader(const BufferHeader& header);

// A stored device buffer's bytes, for the bulk data plane to serve.
absl::StatusOr<std::shared_ptr<const bulk::Source>> BulkSourceOf(
    std::shared_ptr<const StoredBuffer> stored);

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
  // Each buffer of `request` as Assemble makes it, up to limits::kAssembleParallel at a
  // time (the caller's thread and `sy-assemble` threads that end with the batch).
  // Returns once every one is made or stored as failed: the first failure, if any.
  // INVALID_ARGUMENT, making none, for more than limits::kAssembleBatchMax.
  absl::Status AssembleAll(const AssembleBuffersRequest& request, uint64_t owner = 0)
      ABSL_LOCKS_EXCLUDED(mutex_);

  // For /metrics: bytes pulled on peers' data planes, and pulls that went back to gRPC
  // because a data plane could not be reached.
  int64_t bulk_bytes_pulled() const { return bulk_bytes_pulled_.load(); }
  int64_t bulk_fallbacks() const { return bulk_fallbacks_.load(); }
  // Buffers made by batches (AssembleAll), each counted as its batch starts.
  int64_t batched() const { return batched_.load(); }
  // Buffers pulled with an offer asked for with their batch's (AskOffers).
  int64_t offered_at_once() const { return offered_at_once_.load(); }

 private:
  struct Source {
    std::vector<int64_t> dims;
    std::shared_ptr<HostBytes> bytes;
  };
  // `offered`: the source's offer, asked for with its batch's (null: none).
  absl::Status Assemble(const AssembleBufferRequest& request, uint64_t owner,
                        const BufferOffer* offered) ABSL_LOCKS_EXCLUDED(mutex_);
  absl::Status Build(const AssembleBufferRequest& request, uint64_t owner,
                     const BufferOffer* offered);
  absl::StatusOr<Source> Fetch(const BufferPiece& piece);
  // The offers of a batch's whole buffers from peers, one call a peer; an entry without
  // an offer is fetched alone (also when the peer is older and cannot offer several).
  std::vector<std::optional<BufferOffer>> AskOffers(const AssembleBuffersRequest& request)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // A header's buffer, its memory allocated.
  static absl::StatusOr<Source> NewSource(const BufferHeader& header);
  // From a peer: over gRPC, or on its data plane when `bulk` and it offers that.
  absl::StatusOr<Source> Pull(const BufferPiece& piece, bool bulk);
  absl::Status PullOffered(const std::string& peer, const BulkOffer& offer, HostBytes& bytes)
      ABSL_LOCKS_EXCLUDED(mutex_);
  bool WantsBulk(const std::string& address) ABSL_LOCKS_EXCLUDED(mutex_);
  Worker::Stub* Peer(const std::string& address) ABSL_LOCKS_EXCLUDED(mutex_);

  const pjrt::Client* client_;
  const DeviceMap* devices_;
  BufferStore* buffers_;
  StreamProgress* progress_;
  absl::Mutex mutex_;
  std::string own_address_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, std::unique_ptr<Worker::Stub>> peers_ ABSL_GUARDED_BY(mutex_);
  // Peers whose data plane could not be reached: their bytes come over gRPC.
  absl::flat_hash_set<std::string> no_bulk_ ABSL_GUARDED_BY(mutex_);
  std::atomic<int64_t> bulk_bytes_pulled_{0};
  std::atomic<int64_t> bulk_fallbacks_{0};
  std::atomic<int64_t> batched_{0};
  std::atomic<int64_t> offered_at_once_{0};
};

}  // namespace switchyard::worker
