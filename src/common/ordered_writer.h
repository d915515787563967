#pragma once

// The writing side of one gRPC stream, shared by threads that must never block on it.
// Messages go out in the order they are given, one write at a time. `Post` only queues
// (a device thread's callback, a worker connection's reader thread serving every
// session: none may wait on one slow client); the stream's own thread may `Write`,
// which writes at once when nothing is queued or being written (one thread handoff
// fewer for the common case) and queues otherwise. A thread of the writer's own writes
// what is queued. A thread that may block can also claim the writing of what it posts
// (`Post(message, &claimed)`, then `WriteClaimed`). Thread-safe.

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/thread_name.h"

namespace switchyard {

template <typename Message>
class OrderedWriter {
 public:
  // Writes one message on the stream; false once the stream has failed.
  using WriteFn = std::function<bool(const Message&)>;

  // `thread_name` names the writer's thread (common/thread_name.h).
  OrderedWriter(WriteFn write, const char* thread_name)
      : write_(std::move(write)), writer_([this, thread_name] {
          NameThisThread(thread_name);
          WriteLoop();
        }) {}
  ~OrderedWriter() { Close(); }
  OrderedWriter(const OrderedWriter&) = delete;
  OrderedWriter& operator=(const OrderedWriter&) = delete;

  // Queues `message`; never blocks. False once closed or failed (the message is dropped).
  bool Post(Message message) ABSL_LOCKS_EXCLUDED(mutex_) {
    absl::MutexLock lock(&mutex_);
    if (closed_ || failed_) return false;
    queue_.push_back(std::move(message));
    return true;
  }

  // Queues `message`, like Post. When nothing was queued or being written, the caller
  // claims the writing: it is then to call WriteClaimed, from a thread that may block,
  // before it waits on anything (one thread handoff fewer). Otherwise `*claimed` is false
  // and the writer's thread writes it.
  bool Post(Message message, bool* claimed) ABSL_LOCKS_EXCLUDED(mutex_) {
    absl::MutexLock lock(&mutex_);
    *claimed = false;
    if (closed_ || failed_) return false;
    queue_.push_back(std::move(message));
    if (queue_.size() == 1 && !writing_) *claimed = writing_ = true;
    return true;
  }

  // After a claiming Post: writes what is queued here, at most `limit` messages (more
  // may come meanwhile from other threads), and leaves the rest to the writer's thread.
  void WriteClaimed(size_t limit) ABSL_LOCKS_EXCLUDED(mutex_) {
    for (size_t written = 0;; ++written) {
      Message message;
      {
        absl::MutexLock lock(&mutex_);
        if (closed_ || failed_ || queue_.empty() || written == limit) {
          writing_ = false;
          return;
        }
        message = std::move(queue_.front());
        queue_.pop_front();
      }
      const bool ok = write_(message);
      if (!ok) {
        absl::MutexLock lock(&mutex_);
        failed_ = true;
        queue_.clear();
      }
    }
  }

  // On the stream's own thread, which may block: writes now if nothing is ahead.
  bool Write(Message message) ABSL_LOCKS_EXCLUDED(mutex_) {
    {
      absl::MutexLock lock(&mutex_);
      if (closed_ || failed_) return false;
      if (!queue_.empty() || writing_) {
        queue_.push_back(std::move(message));
        return true;
      }
      writing_ = true;
    }
    return WriteOne(message);
  }

  // Waits up to `timeout` until nothing is queued or being written (or the stream has
  // failed, or closing); true if so.
  bool AwaitIdle(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mutex_) {
    absl::MutexLock lock(&mutex_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
      return (queue_.empty() && !writing_) || failed_ || closed_;
    };
    return mutex_.AwaitWithTimeout(absl::Condition(&idle), timeout) && queue_.empty() && !writing_;
  }

  // Stops accepting, drops what is queued, and waits for a write in progress. One still
  // blocked after `grace` (a peer that stopped reading) is unblocked by `unstick`, which
  // cancels the stream. After it the stream may go away. Idempotent.
  void Close(absl::Duration grace = absl::InfiniteDuration(),
             const std::function<void()>& unstick = nullptr) ABSL_LOCKS_EXCLUDED(mutex_) {
    {
      absl::MutexLock lock(&mutex_);
      closed_ = true;
      queue_.clear();
      auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return !writing_; };
      if (!mutex_.AwaitWithTimeout(absl::Condition(&idle), grace) && unstick != nullptr) {
        unstick();
      }
      mutex_.Await(absl::Condition(&idle));
    }
    if (writer_.joinable() && writer_.get_id() != std::this_thread::get_id()) writer_.join();
  }

 private:
  bool WriteOne(const Message& message) ABSL_LOCKS_EXCLUDED(mutex_) {
    const bool ok = write_(message);
    absl::MutexLock lock(&mutex_);
    writing_ = false;
    if (!ok) {
      failed_ = true;
      queue_.clear();
    }
    return ok;
  }

  void WriteLoop() ABSL_LOCKS_EXCLUDED(mutex_) {
    while (true) {
      Message message;
      {
        absl::MutexLock lock(&mutex_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
          return closed_ || (!queue_.empty() && !writing_);
        };
        mutex_.Await(absl::Condition(&ready));
        if (closed_) return;
        message = std::move(queue_.front());
        queue_.pop_front();
        writing_ = true;
      }
      WriteOne(message);
    }
  }

  const WriteFn write_;
  mutable absl::Mutex mutex_;
  std::deque<Message> queue_ ABSL_GUARDED_BY(mutex_);
  bool writing_ ABSL_GUARDED_BY(mutex_) = false;  // one write at a time, by either thread
  bool failed_ ABSL_GUARDED_BY(mutex_) = false;
  bool closed_ ABSL_GUARDED_BY(mutex_) = false;
  std::thread writer_;  // last: starts once the rest is built
};

}  // namespace switchyard
