#include "proxy/launch_budget.h"

#include "absl/time/time.h"

namespace switchyard::proxy {

absl::Status LaunchBudget::Acquire(const std::function<bool()>& cancelled) {
  absl::MutexLock lock(&mutex_);
  auto fits = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return !full_; };
  while (!fits()) {
    if (cancelled && cancelled()) {
      return absl::CancelledError("the session ended while its launches were queued");
    }
    mutex_.AwaitWithTimeout(absl::Condition(&fits), absl::Milliseconds(100));
  }
  if (++in_flight_ >= max_) full_ = true;
  return absl::OkStatus();
}

void LaunchBudget::Release() {
  absl::MutexLock lock(&mutex_);
  if (--in_flight_ <= max_ / 2) full_ = false;
}

int64_t LaunchBudget::in_flight() const {
  absl::MutexLock lock(&mutex_);
  return in_flight_;
}

}  // namespace switchyard::proxy
