#pragma once

// The worker's buffers, by caller-chosen id. Thread-safe. Entries are shared so a
// fetch in progress keeps its buffer alive across a concurrent delete.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pjrt/buffer.h"

namespace switchyard::worker {

struct StoredBuffer {
  int64_t device_id = 0;                 // global
  uint64_t owner = 0;                    // who made it (OwnerLeases); 0: nobody in particular
  std::unique_ptr<pjrt::Buffer> buffer;  // null when `error` is set, or for strings
  absl::Status error;                    // why the operation meant to produce this buffer failed
  // A string array's elements (DType STRING, row-major): host-side, made by colocated
  // Python or a client's put; only fetches and colocated Python read them.
  bool is_strings = false;
  std::vector<std::string> strings;
  std::vector<int64_t> dims;  // of the strings
  // An output of a launch on this worker: computed when that launch is, which the
  // device's own order of launches already accounts for (no need to watch it).
  bool launched = false;
};

class BufferStore {
 public:
  // Memory claimed for buffers about to be made (a launch's outputs, an upload): it
  // counts against the bound until it is destroyed, by when they are in the store.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept
        : store_(std::exchange(other.store_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
    Reservation& operator=(Reservation&& other) noexcept;
    ~Reservation() { Release(); }

   private:
    friend class BufferStore;
    void Release();
    Reservation(BufferStore* store, int64_t bytes) : store_(store), bytes_(bytes) {}
    BufferStore* store_ = nullptr;
    int64_t bytes_ = 0;
  };

  // `max_bytes`: the most the buffers held and reserved may take (0: no bound). On a
  // host whose devices are its own memory (CPU), past it the kernel's OOM killer would
  // pick a process; a refusal names the bound instead.
  explicit BufferStore(int64_t max_bytes = 0) : max_bytes_(max_bytes) {}

  // Claims `bytes` for what `describe` names (a sentence's subject, "the outputs of
  // executable 7"; called only for an error), waiting up to `wait` for room (deletions
  // on their way by another path). RESOURCE_EXHAUSTED naming the bound if the buffers
  // held and reserved would pass it.
  absl::StatusOr<Reservation> Reserve(int64_t bytes, absl::FunctionRef<std::string()> describe,
                                      absl::Duration wait = absl::ZeroDuration())
      ABSL_LOCKS_EXCLUDED(mutex_);
  // INVALID_ARGUMENT for id 0; ALREADY_EXISTS for an id in use.
  absl::Status Add(uint64_t id, int64_t device_id, std::unique_ptr<pjrt::Buffer> buffer,
                   uint64_t owner = 0, bool launched = false) ABSL_LOCKS_EXCLUDED(mutex_);
  // A string array's shard; the same errors as `Add`.
  absl::Status AddStrings(uint64_t id, int64_t device_id, std::vector<int64_t> dims,
                          std::vector<std::string> strings, uint64_t owner = 0)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Records that the buffer `id` will never be made, and why; readers get `error`.
  void AddError(uint64_t id, absl::Status error, uint64_t owner = 0) ABSL_LOCKS_EXCLUDED(mutex_);
  // The buffer, or the error stored in its place; NOT_FOUND for an unknown id;
  // INVALID_ARGUMENT for strings (devices cannot take them).
  absl::StatusOr<std::shared_ptr<const StoredBuffer>> Get(uint64_t id) const
      ABSL_LOCKS_EXCLUDED(mutex_);
  // The entry whether device buffer or strings (`is_strings`), or the stored error.
  absl::StatusOr<std::shared_ptr<const StoredBuffer>> GetAny(uint64_t id) const
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Like `GetAny`, but waits up to `timeout` for the id to appear: the operation that
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
  int64_t max_bytes() const { return max_bytes_; }
  // Buffers deleted so far (Delete, DeleteOwned).
  int64_t deleted() const { return deleted_.load(); }

 private:
  // A table that held a million buffers keeps their slots after they go (tens of MiB,
  // never given back): it is rebuilt to fit once it is mostly empty.
  void ShrinkLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const int64_t max_bytes_;
  std::atomic<int64_t> deleted_{0};
  mutable absl::Mutex mutex_;
  int64_t reserved_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::flat_hash_map<uint64_t, std::shared_ptr<const StoredBuffer>> buffers_
      ABSL_GUARDED_BY(mutex_);
  int64_t bytes_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace switchyard::worker
