#include "rm/kv_store.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/limits.h"

namespace switchyard::rm {

absl::Status KvStore::Put(const std::string& key, std::string value, bool allow_overwrite) {
  if (key.empty() || static_cast<int64_t>(key.size()) > limits::kKvKeyBytesMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("key must have 1 to ", limits::kKvKeyBytesMax, " bytes"));
  }
  if (static_cast<int64_t>(value.size()) > limits::kKvValueBytesMax) {
    return absl::InvalidArgumentError(absl::StrCat("value of ", value.size(), " bytes for '", key,
                                                   "' exceeds ", limits::kKvValueBytesMax));
  }
  absl::ReleasableMutexLock lock(&mutex_);
  auto it = values_.find(key);
  if (it != values_.end() && !allow_overwrite) {
    return absl::AlreadyExistsError(absl::StrCat("key '", key, "' is set"));
  }
  const int64_t old_bytes = it == values_.end() ? 0 : key.size() + it->second.size();
  const int64_t new_bytes = key.size() + value.size();
  if (it == values_.end() && static_cast<int64_t>(values_.size()) >= limits::kKvKeysMax) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the key-value store holds ", values_.size(), " keys, its limit"));
  }
  if (bytes_ - old_bytes + new_bytes > limits::kKvBytesMax) {
    return absl::ResourceExhaustedError(absl::StrCat("the key-value store holds ", bytes_,
                                                     " bytes; ", new_bytes, " more exceed its ",
                                                     limits::kKvBytesMax));
  }
  bytes_ += new_bytes - old_bytes;
  std::vector<GetDone> answered;
  for (auto waiter = waiters_.begin(); waiter != waiters_.end();) {
    if (waiter->second.key == key) {
      answered.push_back(std::move(waiter->second.done));
      waiter = waiters_.erase(waiter);
    } else {
      ++waiter;
    }
  }
  if (answered.empty()) {
    values_[key] = std::move(value);
    return absl::OkStatus();
  }
  values_[key] = value;
  lock.Release();
  for (GetDone& done : answered) std::move(done)(value);
  return absl::OkStatus();
}

KvStore::WaitId KvStore::Get(const std::string& key, absl::Time now, absl::Time deadline,
                             GetDone done) {
  absl::StatusOr<std::string> answer;
  {
    absl::MutexLock lock(&mutex_);
    auto it = values_.find(key);
    if (it != values_.end()) {
      answer = it->second;
    } else if (deadline <= now) {
      answer = absl::NotFoundError(absl::StrCat("key '", key, "' is not set"));
    } else if (static_cast<int64_t>(waiters_.size()) >= limits::kKvWaitersMax) {
      answer = absl::ResourceExhaustedError(
          absl::StrCat(waiters_.size(), " gets already wait on the key-value store, its limit"));
    } else {
      const WaitId id = next_id_++;
      waiters_[id] = Waiter{key, deadline, deadline - now, std::move(done)};
      return id;
    }
  }
  std::move(done)(std::move(answer));
  return 0;
}

void KvStore::Expire(absl::Time now) {
  std::vector<std::pair<GetDone, absl::Status>> expired;
  {
    absl::MutexLock lock(&mutex_);
    for (auto waiter = waiters_.begin(); waiter != waiters_.end();) {
      if (waiter->second.deadline > now) {
        ++waiter;
        continue;
      }
      expired.emplace_back(std::move(waiter->second.done),
                           absl::DeadlineExceededError(absl::StrCat(
                               "key '", waiter->second.key, "' was not set within ",
                               absl::FormatDuration(absl::Trunc(waiter->second.waited_at_most,
                                                                absl::Milliseconds(1))))));
      waiter = waiters_.erase(waiter);
    }
  }
  for (auto& [done, status] : expired) std::move(done)(status);
}

bool KvStore::Cancel(WaitId id) {
  GetDone dropped;  // destroyed outside the lock
  absl::MutexLock lock(&mutex_);
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return false;
  dropped = std::move(it->second.done);
  waiters_.erase(it);
  return true;
}

size_t KvStore::size() const {
  absl::MutexLock lock(&mutex_);
  return values_.size();
}

int64_t KvStore::waiting() const {
  absl::MutexLock lock(&mutex_);
  return static_cast<int64_t>(waiters_.size());
}

int64_t KvStore::bytes() const {
  absl::MutexLock lock(&mutex_);
  return bytes_;
}

}  // namespace switchyard::rm
