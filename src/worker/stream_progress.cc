#include "worker/stream_progress.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace switchyard::worker {
namespace {

// Ended streams are remembered this many at a time, for reads that arrive late.
constexpr size_t kClosedRemembered = 4096;
constexpr absl::Duration kCancelPoll = absl::Milliseconds(100);

}  // namespace

void StreamProgress::Open(uint64_t stream) {
  absl::MutexLock lock(&mutex_);
  streams_[stream] = State{};
}

void StreamProgress::Advance(uint64_t stream, uint64_t seq) {
  absl::MutexLock lock(&mutex_);
  auto it = streams_.find(stream);
  if (it != streams_.end()) it->second.done = std::max(it->second.done, seq);
}

void StreamProgress::Close(uint64_t stream) {
  absl::MutexLock lock(&mutex_);
  auto it = streams_.find(stream);
  if (it == streams_.end() || !it->second.open) return;
  it->second.open = false;
  closed_.push_back(stream);
  if (closed_.size() > kClosedRemembered) {
    streams_.erase(closed_.front());
    closed_.pop_front();
  }
}

absl::Status StreamProgress::WaitFor(uint64_t stream, uint64_t seq, absl::Time deadline,
                                     absl::Duration unknown_wait,
                                     const std::function<bool()>& cancelled) {
  const absl::Time unknown_deadline = std::min(deadline, absl::Now() + unknown_wait);
  absl::MutexLock lock(&mutex_);
  while (true) {
    auto it = streams_.find(stream);
    const absl::Time now = absl::Now();
    if (it != streams_.end()) {
      if (it->second.done >= seq) return absl::OkStatus();
      if (!it->second.open) {
        return absl::UnavailableError(
            absl::StrCat("operation stream ", stream, " ended after operation ", it->second.done,
                         ", before operation ", seq, " that makes the buffer"));
      }
    } else if (now >= unknown_deadline) {
      return absl::NotFoundError(
          absl::StrCat("operation stream ", stream, " is unknown to this worker (it restarted?)"));
    }
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("operation ", seq, " of stream ", stream, " has not run in time"));
    }
    if (cancelled && cancelled()) return absl::CancelledError("the reader went away");
    auto moved = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
      auto s = streams_.find(stream);
      return s != streams_.end() && (s->second.done >= seq || !s->second.open);
    };
    mutex_.AwaitWithDeadline(absl::Condition(&moved), std::min(deadline, now + kCancelPoll));
  }
}

}  // namespace switchyard::worker
