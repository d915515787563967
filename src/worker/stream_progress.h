#pragma once

// How far each Dispatch stream has got. A read of a buffer made by operation `seq` of
// stream `s` (sent by another path than the read) waits exactly until `s` has carried
// that operation out, and fails at once when `s` ended before: no read waits on
// something that can no longer come. Thread-safe.

#include <cstdint>
#include <deque>
#include <functional>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace switchyard::worker {

class StreamProgress {
 public:
  void Open(uint64_t stream) ABSL_LOCKS_EXCLUDED(mutex_);
  // Operation `seq` of `stream` is done (its outputs, or their errors, are stored).
  void Advance(uint64_t stream, uint64_t seq) ABSL_LOCKS_EXCLUDED(mutex_);
  void Close(uint64_t stream) ABSL_LOCKS_EXCLUDED(mutex_);

  // OK once `stream` has carried out `seq`. UNAVAILABLE if it ended before; NOT_FOUND
  // if the stream has not opened within `unknown_wait` (it never will: it was opened
  // on a process that is gone); DEADLINE_EXCEEDED past `deadline`; CANCELLED once
  // `cancelled()` says so (checked every 100 ms).
  absl::Status WaitFor(uint64_t stream, uint64_t seq, absl::Time deadline,
                       absl::Duration unknown_wait, const std::function<bool()>& cancelled)
      ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  struct State {
    uint64_t done = 0;
    bool open = true;
  };
  absl::Mutex mutex_;
  absl::flat_hash_map<uint64_t, State> streams_ ABSL_GUARDED_BY(mutex_);
  std::deque<uint64_t> closed_ ABSL_GUARDED_BY(mutex_);  // oldest first, bounded
};

}  // namespace switchyard::worker
