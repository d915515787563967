#pragma once

// Threads that run blocking tasks (a session's fetches, a worker's storage writes) so
// that the loop handing them out goes on: a task goes to an idle thread, or to a new one while
// there are fewer than `max`; otherwise `Run` runs it on the caller's thread (the client waits its
// turn). Idle threads stay for the next task, so a task costs a wakeup, not a thread. Thread-safe.

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/thread_name.h"

namespace switchyard {

class TaskThreads {
 public:
  // `thread_name` names the threads (common/thread_name.h).
  TaskThreads(int max, const char* thread_name) : max_(max), thread_name_(thread_name) {}
  ~TaskThreads() { Stop(); }
  TaskThreads(const TaskThreads&) = delete;
  TaskThreads& operator=(const TaskThreads&) = delete;

  void Run(std::function<void()> task) ABSL_LOCKS_EXCLUDED(mutex_) {
    {
      absl::MutexLock lock(&mutex_);
      if (!stopping_ &&
          (idle_ > static_cast<int>(queue_.size()) || static_cast<int>(threads_.size()) < max_)) {
        queue_.push_back(std::move(task));
        if (idle_ < static_cast<int>(queue_.size())) {
          threads_.emplace_back([this] {
            NameThisThread(thread_name_);
            Loop();
          });
        }
        return;
      }
    }
    task();
  }

  // Runs what is queued, then joins every thread. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mutex_) {
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&mutex_);
      stopping_ = true;
      threads.swap(threads_);
    }
    for (std::thread& thread : threads) thread.join();
  }

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mutex_) {
    absl::MutexLock lock(&mutex_);
    while (true) {
      ++idle_;
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
        return !queue_.empty() || stopping_;
      };
      mutex_.Await(absl::Condition(&ready));
      --idle_;
      if (queue_.empty()) return;  // stopping, nothing left
      std::function<void()> task = std::move(queue_.front());
      queue_.pop_front();
      mutex_.Unlock();
      task();
      mutex_.Lock();
    }
  }

  const int max_;
  const char* const thread_name_;
  absl::Mutex mutex_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mutex_);
  int idle_ ABSL_GUARDED_BY(mutex_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace switchyard
