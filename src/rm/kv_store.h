#pragma once

// The key-value store multi-host PJRT clients bootstrap from. Thread-safe; a
// get may wait for a key another host has not put yet. Bounded in keys, bytes and
// waiting gets (common/limits.h): past them it answers RESOURCE_EXHAUSTED.

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace switchyard::rm {

class KvStore {
 public:
  // ALREADY_EXISTS for a key that is set unless `allow_overwrite`; INVALID_ARGUMENT
  // for an empty key or one over the size limit; RESOURCE_EXHAUSTED when the store is
  // full.
  absl::Status Put(const std::string& key, std::string value, bool allow_overwrite)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // NOT_FOUND at once when `timeout` is zero; DEADLINE_EXCEEDED when the key does
  // not appear in time; RESOURCE_EXHAUSTED when too many gets already wait.
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mutex_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mutex_);
  int64_t bytes() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  mutable absl::Mutex mutex_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mutex_);
  int64_t bytes_ ABSL_GUARDED_BY(mutex_) = 0;  // keys and values
  int64_t waiters_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace switchyard::rm
