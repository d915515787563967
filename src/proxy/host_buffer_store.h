#pragma once

// One session's host buffers: bytes the client uploads (for arrays it creates) and
// bytes we prepare for it to download. Thread-safe: the session stream and the
// host-buffer RPCs run on different threads.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace switchyard::proxy {

class HostBufferStore {
 public:
  // ALREADY_EXISTS for a handle in use; FAILED_PRECONDITION after `Shutdown`.
  absl::Status Store(uint64_t handle, std::string data) ABSL_LOCKS_EXCLUDED(mutex_);
  // Waits up to `timeout` for the handle to be stored. NOT_FOUND when it does not
  // arrive in time; CANCELLED if the store shuts down or `cancelled()` turns true
  // meanwhile (checked every 100 ms).
  absl::StatusOr<std::shared_ptr<const std::string>> Lookup(
      uint64_t handle, absl::Duration timeout, const std::function<bool()>& cancelled = nullptr)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // NOT_FOUND for an unknown handle.
  absl::Status Delete(uint64_t handle) ABSL_LOCKS_EXCLUDED(mutex_);
  // Wakes every waiter; later stores fail.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mutex_);

  int64_t bytes() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  mutable absl::Mutex mutex_;
  std::map<uint64_t, std::shared_ptr<const std::string>> buffers_ ABSL_GUARDED_BY(mutex_);
  int64_t bytes_ ABSL_GUARDED_BY(mutex_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace switchyard::proxy
