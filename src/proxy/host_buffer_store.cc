#include "proxy/host_buffer_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace switchyard::proxy {

absl::Status HostBufferStore::Store(uint64_t handle, std::string data) {
  absl::MutexLock lock(&mutex_);
  if (shutdown_) return absl::FailedPreconditionError("session is shutting down");
  auto buffer = std::make_shared<const std::string>(std::move(data));
  const int64_t size = buffer->size();
  if (!buffers_.emplace(handle, std::move(buffer)).second) {
    return absl::AlreadyExistsError(absl::StrCat("host buffer ", handle, " already exists"));
  }
  bytes_ += size;
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const std::string>> HostBufferStore::Lookup(
    uint64_t handle, absl::Duration timeout, const std::function<bool()>& cancelled) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mutex_);
  auto arrived = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return shutdown_ || buffers_.count(handle) > 0;
  };
  while (true) {
    auto it = buffers_.find(handle);
    if (it != buffers_.end()) return it->second;
    if (shutdown_ || (cancelled && cancelled())) {
      return absl::CancelledError("session is shutting down");
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::NotFoundError(absl::StrCat("host buffer ", handle, " not found"));
    }
    mutex_.AwaitWithTimeout(absl::Condition(&arrived), std::min(left, absl::Milliseconds(100)));
  }
}

absl::Status HostBufferStore::Delete(uint64_t handle) {
  absl::MutexLock lock(&mutex_);
  auto it = buffers_.find(handle);
  if (it == buffers_.end()) {
    return absl::NotFoundError(absl::StrCat("host buffer ", handle, " not found"));
  }
  bytes_ -= it->second->size();
  buffers_.erase(it);
  return absl::OkStatus();
}

void HostBufferStore::Shutdown() {
  absl::MutexLock lock(&mutex_);
  shutdown_ = true;
  buffers_.clear();
  bytes_ = 0;
}

int64_t HostBufferStore::bytes() const {
  absl::MutexLock lock(&mutex_);
  return bytes_;
}

}  // namespace switchyard::proxy
