#pragma once

// Arrays saved to and loaded from storage by the workers themselves, each its own
// shards, so checkpoint bytes never pass through the proxy or the client (Pathways'
// persistence API, as pathwaysutils and Orbax use it). The layout is zarr_array.h's.
// Thread-safe.

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "common/task_threads.h"
#include "pjrt/client.h"
#include "switchyard/worker.pb.h"
#include "worker/buffer_store.h"
#include "worker/device_map.h"

namespace switchyard::worker {

class ShardStorage {
 public:
  // `mount_root`: where gs:// and s3:// buckets are mounted (empty: they are refused).
  ShardStorage(const pjrt::Client* client, const DeviceMap* devices, BufferStore* buffers,
               std::string mount_root)
      : client_(client), devices_(devices), buffers_(buffers), mount_root_(std::move(mount_root)) {}

  // Takes the buffers now (they are made by operations before this one); writes them on
  // storage threads, several at once, and runs `done` (on one of them) with the first
  // failure, naming the array and the file, or OK once every shard is on storage.
  void Save(const SaveShardsRequest& request, std::function<void(absl::Status)> done);

  // Makes each buffer from storage, on this thread, for `owner`. On failure stores the
  // error under every id of the request still to be made, and returns it.
  absl::Status Load(const LoadShardsRequest& request, uint64_t owner);

 private:
  // `location`/`name` on this host.
  absl::StatusOr<std::string> Directory(const StoredShard& shard) const;
  // `session`: the caller's, for profiles.
  absl::Status SaveOne(const StoredShard& shard, const StoredBuffer& buffer,
                       uint64_t session) const;
  absl::Status LoadOne(const StoredShard& shard, uint64_t owner, uint64_t session) const;

  const pjrt::Client* client_;
  const DeviceMap* devices_;
  BufferStore* buffers_;
  const std::string mount_root_;
  // Storage writes block on the device and the disk: a few at once fill the disk's
  // bandwidth; past that a save waits on the stream thread (backpressure).
  TaskThreads writers_{4, "sy-storage"};
};

}  // namespace switchyard::worker
