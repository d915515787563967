#pragma once

// A session's status futures that resolve after the request that made them was
// answered (a plugin program's token: its writes finish on the workers later). A check
// of one is answered when it resolves, without holding the session's request loop.
// Resolved from any thread; each future is checked once. Thread-safe.

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace switchyard::proxy {

class LateFutures {
 public:
  using Answer = std::function<void(absl::Status)>;

  void Add(uint64_t handle) ABSL_LOCKS_EXCLUDED(mutex_) {
    absl::MutexLock lock(&mutex_);
    futures_[handle];
  }

  // Runs the waiting check's answer, if any (on this thread, outside the lock).
  void Resolve(uint64_t handle, absl::Status status) ABSL_LOCKS_EXCLUDED(mutex_) {
    Answer answer;
    {
      absl::MutexLock lock(&mutex_);
      auto it = futures_.find(handle);
      if (it == futures_.end() || it->second.result.has_value()) return;
      if (it->second.waiting == nullptr) {
        it->second.result = std::move(status);
        return;
      }
      answer = std::move(it->second.waiting);
      futures_.erase(it);
    }
    answer(std::move(status));
  }

  // False if `handle` is not one of these. Otherwise `answer` runs with its status once
  // it resolves (now, if it has), and the future is gone.
  bool Check(uint64_t handle, Answer answer) ABSL_LOCKS_EXCLUDED(mutex_) {
    absl::Status status;
    {
      absl::MutexLock lock(&mutex_);
      auto it = futures_.find(handle);
      if (it == futures_.end()) return false;
      if (!it->second.result.has_value()) {
        if (it->second.waiting != nullptr) {
          status = absl::FailedPreconditionError("this future is already being waited on");
        } else {
          it->second.waiting = std::move(answer);
          return true;
        }
      } else {
        status = *std::move(it->second.result);
        futures_.erase(it);
      }
    }
    answer(std::move(status));
    return true;
  }

  // Answers every waiting check with `status` (the session is ending).
  void FailAll(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mutex_) {
    absl::flat_hash_map<uint64_t, Future> futures;
    {
      absl::MutexLock lock(&mutex_);
      futures.swap(futures_);
    }
    for (auto& [handle, future] : futures) {
      if (future.waiting != nullptr) future.waiting(status);
    }
  }

 private:
  struct Future {
    std::optional<absl::Status> result;
    Answer waiting;
  };
  absl::Mutex mutex_;
  absl::flat_hash_map<uint64_t, Future> futures_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace switchyard::proxy
