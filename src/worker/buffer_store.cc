#include "worker/buffer_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace switchyard::worker {

BufferStore::Reservation& BufferStore::Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    Release();
    store_ = std::exchange(other.store_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void BufferStore::Reservation::Release() {
  if (store_ == nullptr) return;
  absl::MutexLock lock(&store_->mutex_);
  store_->reserved_ -= bytes_;
  store_ = nullptr;
  bytes_ = 0;
}

absl::StatusOr<BufferStore::Reservation> BufferStore::Reserve(
    int64_t bytes, absl::FunctionRef<std::string()> describe, absl::Duration wait) {
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat(describe(), ": negative size"));
  absl::MutexLock lock(&mutex_);
  auto fits = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return max_bytes_ <= 0 || bytes <= max_bytes_ - bytes_ - reserved_;
  };
  if (!fits() && wait > absl::ZeroDuration()) mutex_.AwaitWithTimeout(absl::Condition(&fits), wait);
  if (!fits()) {
    return absl::ResourceExhaustedError(
        absl::StrCat(describe(), " would take ", bytes, " bytes; this worker holds ", bytes_,
                     " bytes of buffers (", reserved_, " more on their way) and allows ",
                     max_bytes_, " (--max_buffer_bytes): free some arrays first"));
  }
  reserved_ += bytes;
  return Reservation(this, bytes);
}

absl::Status BufferStore::Add(uint64_t id, int64_t device_id, std::unique_ptr<pjrt::Buffer> buffer,
                              uint64_t owner, bool launched) {
  if (id == 0) return absl::InvalidArgumentError("buffer id 0 is reserved");
  auto entry = std::make_shared<StoredBuffer>();
  entry->device_id = device_id;
  entry->owner = owner;
  entry->launched = launched;
  entry->buffer = std::move(buffer);
  absl::MutexLock lock(&mutex_);
  auto [it, inserted] = buffers_.try_emplace(id, entry);
  if (!inserted) return absl::AlreadyExistsError(absl::StrCat("buffer ", id, " already exists"));
  bytes_ += entry->buffer->host_size_bytes();
  return absl::OkStatus();
}

absl::Status BufferStore::AddStrings(uint64_t id, int64_t device_id, std::vector<int64_t> dims,
                                     std::vector<std::string> strings, uint64_t owner) {
  if (id == 0) return absl::InvalidArgumentError("buffer id 0 is reserved");
  auto entry = std::make_shared<StoredBuffer>();
  entry->device_id = device_id;
  entry->owner = owner;
  entry->is_strings = true;
  entry->strings = std::move(strings);
  entry->dims = std::move(dims);
  absl::MutexLock lock(&mutex_);
  auto [it, inserted] = buffers_.try_emplace(id, entry);
  if (!inserted) return absl::AlreadyExistsError(absl::StrCat("buffer ", id, " already exists"));
  return absl::OkStatus();
}

void BufferStore::AddError(uint64_t id, absl::Status error, uint64_t owner) {
  if (id == 0) return;
  auto entry = std::make_shared<StoredBuffer>();
  entry->error = std::move(error);
  entry->owner = owner;
  absl::MutexLock lock(&mutex_);
  buffers_.try_emplace(id, std::move(entry));
}

absl::StatusOr<std::shared_ptr<const StoredBuffer>> BufferStore::Get(uint64_t id) const {
  SY_ASSIGN_OR_RETURN(std::shared_ptr<const StoredBuffer> stored, GetAny(id));
  if (stored->is_strings) {
    return absl::InvalidArgumentError(absl::StrCat(
        "buffer ", id,
        " is a string array: strings live on the host, for colocated Python and fetches; "
        "programs, transfers and checkpoints take numeric arrays"));
  }
  return stored;
}

absl::StatusOr<std::shared_ptr<const StoredBuffer>> BufferStore::GetAny(uint64_t id) const {
  return GetWhenPresent(id, absl::ZeroDuration());
}

absl::StatusOr<std::shared_ptr<const StoredBuffer>> BufferStore::GetWhenPresent(
    uint64_t id, absl::Duration timeout) const {
  absl::MutexLock lock(&mutex_);
  auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return buffers_.contains(id); };
  if (timeout > absl::ZeroDuration()) mutex_.AwaitWithTimeout(absl::Condition(&present), timeout);
  auto it = buffers_.find(id);
  if (it == buffers_.end()) return absl::NotFoundError(absl::StrCat("unknown buffer ", id));
  if (!it->second->error.ok()) return it->second->error;
  return it->second;
}

bool BufferStore::Contains(uint64_t id) const {
  absl::MutexLock lock(&mutex_);
  return buffers_.contains(id);
}

std::vector<uint64_t> BufferStore::Delete(const std::vector<uint64_t>& ids) {
  std::vector<uint64_t> not_found;
  std::vector<std::shared_ptr<const StoredBuffer>> doomed;  // freed outside the lock
  absl::MutexLock lock(&mutex_);
  for (uint64_t id : ids) {
    auto it = buffers_.find(id);
    if (it == buffers_.end()) {
      not_found.push_back(id);
      continue;
    }
    if (it->second->buffer != nullptr) bytes_ -= it->second->buffer->host_size_bytes();
    doomed.push_back(std::move(it->second));
    buffers_.erase(it);
  }
  ShrinkLocked();
  deleted_.fetch_add(static_cast<int64_t>(doomed.size()));
  return not_found;
}

void BufferStore::ShrinkLocked() {
  constexpr size_t kSmallTable = 4096;
  if (buffers_.capacity() > kSmallTable && buffers_.size() < buffers_.capacity() / 8) {
    buffers_.rehash(0);  // to fit what is left
  }
}

int64_t BufferStore::DeleteOwned(uint64_t owner) {
  if (owner == 0) return 0;
  std::vector<std::shared_ptr<const StoredBuffer>> doomed;  // freed outside the lock
  absl::MutexLock lock(&mutex_);
  for (auto it = buffers_.begin(); it != buffers_.end();) {
    if (it->second->owner != owner) {
      ++it;
      continue;
    }
    if (it->second->buffer != nullptr) bytes_ -= it->second->buffer->host_size_bytes();
    doomed.push_back(std::move(it->second));
    buffers_.erase(it++);
  }
  ShrinkLocked();
  deleted_.fetch_add(static_cast<int64_t>(doomed.size()));
  return doomed.size();
}

int64_t BufferStore::size() const {
  absl::MutexLock lock(&mutex_);
  return buffers_.size();
}

int64_t BufferStore::bytes() const {
  absl::MutexLock lock(&mutex_);
  return bytes_;
}

}  // namespace switchyard::worker
