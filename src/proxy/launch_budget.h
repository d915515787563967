#pragma once

// How many launches a session may have sent to its workers and not yet seen computed.
// All sessions of a proxy share each worker's operation stream, where a launch waits
// behind everything sent before it: a session that floods (a loop that never waits on a
// result) would put an unbounded queue ahead of every other session's next call. Past
// the budget the flooding session's own request thread waits for its launches to finish,
// as a local runtime's dispatch queue makes the Python thread wait, so the queue ahead
// of others stays short and the proxy's memory for it bounded. Thread-safe.

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace switchyard::proxy {

class LaunchBudget {
 public:
  explicit LaunchBudget(int64_t max) : max_(max) {}

  // Waits until one more launch fits; CANCELLED once `cancelled()` turns true meanwhile
  // (checked at least every 100 ms). Each OK must be matched by one `Release`. Once full,
  // nothing more fits until half the budget is done: a waiting thread wakes once per
  // half budget, not once per launch (each wake-up costs the devices CPU on a host).
  absl::Status Acquire(const std::function<bool()>& cancelled) ABSL_LOCKS_EXCLUDED(mutex_);
  // A launch acquired before is computed, failed, or was never sent.
  void Release() ABSL_LOCKS_EXCLUDED(mutex_);

  int64_t in_flight() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  const int64_t max_;
  mutable absl::Mutex mutex_;
  int64_t in_flight_ ABSL_GUARDED_BY(mutex_) = 0;
  bool full_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace switchyard::proxy
