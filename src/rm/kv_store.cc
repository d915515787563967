#include "rm/kv_store.h"

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
  absl::MutexLock lock(&mutex_);
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
  values_[key] = std::move(value);
  return absl::OkStatus();
}

absl::StatusOr<std::string> KvStore::Get(const std::string& key, absl::Duration timeout) {
  absl::MutexLock lock(&mutex_);
  auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return values_.count(key) > 0; };
  if (timeout > absl::ZeroDuration() && !present()) {
    if (waiters_ >= limits::kKvWaitersMax) {
      return absl::ResourceExhaustedError(
          absl::StrCat(waiters_, " gets already wait on the key-value store, its limit"));
    }
    ++waiters_;
    mutex_.AwaitWithTimeout(absl::Condition(&present), timeout);
    --waiters_;
  }
  auto it = values_.find(key);
  if (it != values_.end()) return it->second;
  if (timeout <= absl::ZeroDuration()) {
    return absl::NotFoundError(absl::StrCat("key '", key, "' is not set"));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("key '", key, "' was not set within ", absl::FormatDuration(timeout)));
}

size_t KvStore::size() const {
  absl::MutexLock lock(&mutex_);
  return values_.size();
}

int64_t KvStore::bytes() const {
  absl::MutexLock lock(&mutex_);
  return bytes_;
}

}  // namespace switchyard::rm
