#pragma once

// The worker's buffers, by caller-chosen id. Thread-safe. Entries are shared so a
// fetch in progress keeps its buffer alive across a concurrent delete.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pjrt/buffer.h"

namespace switchyard::worker {

struct StoredBuffer {
  int64_t device_id = 0;                 // global
  uint64_t owner = 0;                    // who made it (OwnerLeases); 0: nobody in particular
  std::unique_ptr<pjrt::Buffer> buffer;  // null when `error` is set
  absl::Status error;                    // why the operation meant to produce this buffer failed
};

class BufferStore {
 public:
  // INVALID_ARGUMENT for id 0; ALREADY_EXISTS for an id in use.
  absl::Status Add(uint64_t id, int64_t device_id, std::unique_ptr<pjrt::Buffer> buffer,
                   uint64_t owner = 0) ABSL_LOCKS_EXCLUDED(mutex_);
  // Records that the buffer `id` will never be made, and why; readers get `error`.
  void AddError(uint64_t id, absl::Status error, uint64_t owner = 0) ABSL_LOCKS_EXCLUDED(mutex_);
  // The buffer, or the error stored in its place; NOT_FOUND for an unknown id.
  absl::StatusOr<std::shared_ptr<const StoredBuffer>> Get(uint64_t id) const
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Like `Get`, but waits up to `timeout` for the id to appear: the operation that
  // makes it may still be on its way (a launch or transfer sent by another path).
  absl::StatusOr<std::shared_ptr<const StoredBuffer>> GetWhenPresent(uint64_t id,
                                                                     absl::Duration timeout) const
      ABSL_LOCKS_EXCLUDED(mutex_);
  bool Contains(uint64_t id) const ABSL_LOCKS_EXCLUDED(mutex_);
  // Returns the ids that were not there.
  std::vector<uint64_t> Delete(const std::vector<uint64_t>& ids) ABSL_LOCKS_EXCLUDED(mutex_);
  // Deletes everything `owner` made; returns how many. Owner 0 owns nothing.
  int64_t DeleteOwned(uint64_t owner) ABSL_LOCKS_EXCLUDED(mutex_);

  int64_t size() const ABSL_LOCKS_EXCLUDED(mutex_);
  int64_t bytes() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  mutable absl::Mutex mutex_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<const StoredBuffer>> buffers_
      ABSL_GUARDED_BY(mutex_);
  int64_t bytes_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace switchyard::worker
