#pragma once

// Whether what one operation makes on a worker (a launch's outputs there) is computed:
// settled once, by the worker's answer, which it pushes when the outputs are ready, or
// by the loss of its epoch. Lets the proxy answer CheckValueReady from what it already
// knows, without a round trip to the worker. Thread-safe.

#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace switchyard::proxy {

class Completion {
 public:
  using Done = std::function<void(absl::Status)>;

  // The first call counts; the waiting `Then`s run here, outside the lock.
  void Settle(absl::Status status) ABSL_LOCKS_EXCLUDED(mutex_) {
    std::vector<Done> waiting;
    {
      absl::MutexLock lock(&mutex_);
      if (status_.has_value()) return;
      status_ = status;
      waiting.swap(waiting_);
    }
    for (Done& done : waiting) done(status);
  }

  // The status once settled; nullopt before.
  std::optional<absl::Status> Now() const ABSL_LOCKS_EXCLUDED(mutex_) {
    absl::MutexLock lock(&mutex_);
    return status_;
  }

  // The status if settled (and `done` is not kept); otherwise nullopt, and `done` runs
  // on the settling thread once it is.
  std::optional<absl::Status> NowOrThen(Done done) ABSL_LOCKS_EXCLUDED(mutex_) {
    absl::MutexLock lock(&mutex_);
    if (!status_.has_value()) waiting_.push_back(std::move(done));
    return status_;
  }

 private:
  mutable absl::Mutex mutex_;
  std::optional<absl::Status> status_ ABSL_GUARDED_BY(mutex_);
  std::vector<Done> waiting_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace switchyard::proxy
