#pragma once

// The key-value store multi-host PJRT clients bootstrap from. Thread-safe; a
// get may wait for a key another host has not put yet. A waiting get is a callback
// held in the store, not a thread: it is answered by the put that sets its key, by
// `Expire` once its deadline has passed, or never (after `Cancel`). Time is passed in.
// Bounded in keys, bytes and waiting gets (common/limits.h): past them it answers
// RESOURCE_EXHAUSTED.

#include <cstdint>
#include <map>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace switchyard::rm {

class KvStore {
 public:
  // Called once with the value or why there is none; never under the store's lock.
  using GetDone = absl::AnyInvocable<void(absl::StatusOr<std::string>) &&>;
  // Names a waiting get, for `Cancel`; 0 for a get answered before `Get` returned.
  using WaitId = uint64_t;

  // ALREADY_EXISTS for a key that is set unless `allow_overwrite`; INVALID_ARGUMENT
  // for an empty key or one over the size limit; RESOURCE_EXHAUSTED when the store is
  // full. Answers the gets waiting for `key`, on the caller's thread.
  absl::Status Put(const std::string& key, std::string value, bool allow_overwrite)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Answers `done` at once with the value of a key that is set; NOT_FOUND when
  // `deadline` is not after `now`; RESOURCE_EXHAUSTED when too many gets already wait.
  // Otherwise the get waits: the put of `key` answers it, or `Expire` with
  // DEADLINE_EXCEEDED once `deadline` has passed.
  WaitId Get(const std::string& key, absl::Time now, absl::Time deadline, GetDone done)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Answers the gets whose deadline is at or before `now` with DEADLINE_EXCEEDED.
  void Expire(absl::Time now) ABSL_LOCKS_EXCLUDED(mutex_);
  // Drops a waiting get unanswered (its caller went away). True if it was still
  // waiting: then `done` is never called; false if it has been or is being answered.
  bool Cancel(WaitId id) ABSL_LOCKS_EXCLUDED(mutex_);

  size_t size() const ABSL_LOCKS_EXCLUDED(mutex_);
  int64_t bytes() const ABSL_LOCKS_EXCLUDED(mutex_);
  int64_t waiting() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  struct Waiter {
    std::string key;
    absl::Time deadline;
    absl::Duration waited_at_most;  // for the message
    GetDone done;
  };

  mutable absl::Mutex mutex_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mutex_);
  int64_t bytes_ ABSL_GUARDED_BY(mutex_) = 0;  // keys and values
  std::map<WaitId, Waiter> waiters_ ABSL_GUARDED_BY(mutex_);
  WaitId next_id_ ABSL_GUARDED_BY(mutex_) = 1;
};

}  // namespace switchyard::rm
