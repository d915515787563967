#include "rm/kv_store.h"

#include "absl/strings/str_cat.h"

namespace switchyard::rm {
namespace {

// Bootstrap values are small (topologies, clique ids); anything larger is a misuse.
constexpr size_t kKeyBytesMax = 1 << 10;
constexpr size_t kValueBytesMax = 4 << 20;

}  // namespace

absl::Status KvStore::Put(const std::string& key, std::string value, bool allow_overwrite) {
  if (key.empty() || key.size() > kKeyBytesMax) {
    return absl::InvalidArgumentError("key must have 1 to 1024 bytes");
  }
  if (value.size() > kValueBytesMax) {
    return absl::InvalidArgumentError(absl::StrCat("value of ", value.size(), " bytes for '", key,
                                                   "' exceeds ", kValueBytesMax));
  }
  absl::MutexLock lock(&mutex_);
  auto [it, inserted] = values_.try_emplace(key, value);
  if (!inserted) {
    if (!allow_overwrite) return absl::AlreadyExistsError(absl::StrCat("key '", key, "' is set"));
    it->second = std::move(value);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> KvStore::Get(const std::string& key, absl::Duration timeout) {
  absl::MutexLock lock(&mutex_);
  auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return values_.count(key) > 0; };
  if (timeout > absl::ZeroDuration()) mutex_.AwaitWithTimeout(absl::Condition(&present), timeout);
  auto it = values_.find(key);
  if (it != values_.end()) return it->second;
  if (timeout <= absl::ZeroDuration()) {
    return absl::NotFoundError(absl::StrCat("key '", key, "' is not set"));
  }
  return absl::DeadlineExceededError(absl::StrCat("key '", key, "' was not set within ",
                                                  absl::FormatDuration(timeout)));
}

size_t KvStore::size() const {
  absl::MutexLock lock(&mutex_);
  return values_.size();
}

}  // namespace switchyard::rm
