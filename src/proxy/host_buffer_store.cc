#include "proxy/host_buffer_store.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/copy_count.h"
#include "common/limits.h"
#include "common/status_macros.h"

namespace switchyard::proxy {
namespace {

constexpr absl::Duration kCancelPoll = absl::Milliseconds(100);
// A windowed buffer gives its pages back (moves them ahead) in steps of this many
// bytes: whole huge pages, and few enough steps that its mapping stays a few areas.
constexpr int64_t kDropGrain = 8 << 20;

}  // namespace

HostBuffer::HostBuffer(std::unique_ptr<HostBytes> space)
    : size_(static_cast<int64_t>(space->size())), bytes_(std::move(space)) {}

HostBuffer::HostBuffer(int64_t size, InOnePiece) : size_(size) {}

HostBuffer::~HostBuffer() {
  if (account_ != nullptr) account_->Give(charged_);
}

void HostBuffer::Charge(std::shared_ptr<HostBufferAccount> account, int64_t bytes) {
  absl::MutexLock lock(&mutex_);
  account_ = std::move(account);
  charged_ = bytes;
}

int64_t HostBuffer::charged() const {
  absl::MutexLock lock(&mutex_);
  return charged_;
}

absl::Status HostBuffer::Fill(std::unique_ptr<HostBytes> data) {
  absl::MutexLock lock(&mutex_);
  if (finished_) return absl::FailedPreconditionError("host buffer already complete");
  if (data == nullptr || (size_ >= 0 && static_cast<int64_t>(data->size()) != size_)) {
    status_ = absl::DataLossError(absl::StrCat("host buffer of ", size_, " bytes filled with ",
                                               data == nullptr ? 0 : data->size()));
    finished_ = true;
    return status_;
  }
  // Sized only now (a string array's contents): charged now, refused past a bound.
  const int64_t size = static_cast<int64_t>(data->size());
  if (size_ < 0 && account_ != nullptr && size > charged_) {
    if (absl::Status taken = account_->Take(size - charged_); !taken.ok()) {
      status_ =
          absl::Status(taken.code(), absl::StrCat("this string array's contents (", size,
                                                  " bytes) cannot be staged: ", taken.message()));
      finished_ = true;
      return status_;
    }
    charged_ = size;
  }
  arrived_ = size;
  bytes_ = std::move(data);
  finished_ = true;
  return absl::OkStatus();
}

absl::Status HostBuffer::Append(absl::string_view bytes) {
  absl::MutexLock lock(&mutex_);
  if (finished_ || arrived_ + static_cast<int64_t>(bytes.size()) > size_) {
    return absl::DataLossError("host buffer larger than its declared buffer_size");
  }
  std::memcpy(bytes_->data() + arrived_, bytes.data(), bytes.size());
  CountCopied(bytes.size());
  arrived_ += bytes.size();
  if (consumed_ && windowed()) DropLocked(arrived_);
  return absl::OkStatus();
}

absl::Span<char> HostBuffer::Space() {
  absl::MutexLock lock(&mutex_);
  if (bytes_ == nullptr || size_ < 0) return {};
  return absl::MakeSpan(bytes_->data(), size_);
}

absl::Status HostBuffer::Arrived(int64_t bytes) {
  absl::MutexLock lock(&mutex_);
  if (finished_ || bytes_ == nullptr || bytes < arrived_ || bytes > size_) {
    return absl::DataLossError("host buffer larger than its declared buffer_size");
  }
  arrived_ = bytes;
  if (consumed_ && windowed()) DropLocked(arrived_);
  return absl::OkStatus();
}

void HostBuffer::Finish(absl::Status status) {
  absl::MutexLock lock(&mutex_);
  if (finished_) return;
  finished_ = true;
  if (status.ok() && arrived_ != size_) {
    status = absl::DataLossError(
        absl::StrCat("host buffer upload ended after ", arrived_, " of ", size_, " bytes"));
  }
  status_ = std::move(status);
}

namespace {

std::atomic<int64_t> uploads_to_begin{0};
std::atomic<int64_t> bytes_to_arrive{0};

// Counts one wait while it lasts.
class Waiting {
 public:
  explicit Waiting(std::atomic<int64_t>* count) : count_(count) { count_->fetch_add(1); }
  ~Waiting() { count_->fetch_sub(1); }
  Waiting(const Waiting&) = delete;
  Waiting& operator=(const Waiting&) = delete;

 private:
  std::atomic<int64_t>* count_;
};

}  // namespace

HostBufferWaits CurrentHostBufferWaits() {
  return HostBufferWaits{uploads_to_begin.load(), bytes_to_arrive.load()};
}

absl::StatusOr<absl::string_view> HostBuffer::WaitFor(int64_t bytes, absl::Time deadline,
                                                      const CancelledFn& cancelled) const {
  absl::MutexLock lock(&mutex_);
  if (windowed()) {
    if (dropped_ > 0) {
      return absl::FailedPreconditionError(
          "this upload was streamed on to a worker as it arrived; its start is no longer held");
    }
    if (account_ != nullptr && charged_ < size_) {
      absl::Status whole = account_->Take(size_ - charged_);
      if (!whole.ok()) {
        return absl::Status(
            whole.code(),
            absl::StrCat(
                "this array's ", size_, " bytes must be staged whole on the proxy (it ",
                "is strided, or one buffer cut into shards, so each shard is cut from the whole): ",
                whole.message()));
      }
      charged_ = size_;
    }
    whole_ = true;  // the writer may go on: every byte is kept from now
  }
  return WaitLocked(bytes, deadline, cancelled);
}

absl::StatusOr<absl::string_view> HostBuffer::StreamFor(int64_t bytes, absl::Time deadline,
                                                        const CancelledFn& cancelled) const {
  absl::MutexLock lock(&mutex_);
  return WaitLocked(bytes, deadline, cancelled);
}

absl::Status HostBuffer::Completion() const {
  absl::MutexLock lock(&mutex_);
  if (!finished_) return absl::UnavailableError("host buffer still arriving");
  return status_;
}

void HostBuffer::SetWindow(int64_t window) {
  absl::MutexLock lock(&mutex_);
  if (arrived_ == 0 && !finished_ && bytes_ != nullptr && window < size_) {
    reader_window_ = window;
    window_ = std::min(window, limits::kHostBufferUnreadWindowBytes);
  }
}

absl::Status HostBuffer::WaitRoom(int64_t end, absl::Time deadline, const CancelledFn& cancelled) {
  absl::MutexLock lock(&mutex_);
  auto room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return !windowed() || consumed_ || finished_ || end - sent_prefix_ <= window_ ||
           arrived_ <= sent_prefix_;
  };
  while (!room()) {
    if (cancelled && cancelled()) return absl::CancelledError("the client went away");
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::NotFoundError(
          absl::StrCat("no reader took host buffer bytes past ", sent_prefix_, " of ", size_));
    }
    mutex_.AwaitWithTimeout(absl::Condition(&room), std::min(left, kCancelPoll));
  }
  // Charged for what it holds once this write is in: its window and the grain not yet
  // given back, or one larger chunk let through when nothing was outstanding.
  if (windowed() && account_ != nullptr) {
    const int64_t held = std::min(size_, end - dropped_);
    if (held > charged_) {
      SY_RETURN_IF_ERROR(account_->Take(held - charged_));
      charged_ = held;
    }
  }
  granted_ = std::max(granted_, end);
  return absl::OkStatus();
}

bool HostBuffer::TakeReader() const {
  absl::MutexLock lock(&mutex_);
  if (!windowed()) return true;
  if (reader_taken_) return false;
  reader_taken_ = true;
  // The whole window once its bounds have room for it; else the writer goes on in the
  // unread window, slower but within them.
  const int64_t more = reader_window_ - window_;
  if (more > 0 && (account_ == nullptr || account_->Take(more).ok())) {
    if (account_ != nullptr) charged_ += more;
    window_ = reader_window_;
  }
  return true;
}

void HostBuffer::Sent(int64_t offset, int64_t end) const {
  absl::MutexLock lock(&mutex_);
  if (!windowed() || end <= sent_prefix_) return;
  int64_t& known = sent_[offset];
  known = std::max(known, end);
  for (auto it = sent_.begin(); it != sent_.end() && it->first <= sent_prefix_;) {
    sent_prefix_ = std::max(sent_prefix_, it->second);
    it = sent_.erase(it);
  }
  DropLocked(sent_prefix_);
}

bool HostBuffer::dropped_any() const {
  absl::MutexLock lock(&mutex_);
  return dropped_ > 0;
}

void HostBuffer::Consumed() const {
  absl::MutexLock lock(&mutex_);
  if (!windowed()) return;
  consumed_ = true;
  DropLocked(arrived_);
}

void HostBuffer::DropLocked(int64_t upto) const {
  const int64_t grain_end = upto / kDropGrain * kDropGrain;
  if (bytes_ == nullptr || grain_end <= dropped_) return;
  const int64_t length = grain_end - dropped_;
  // Ahead of anything the writer may be writing (it writes only where `WaitRoom` let it),
  // where no one reads.
  const int64_t ahead = std::max(arrived_, granted_);
  const int64_t to = std::max(recycled_to_, (ahead + kDropGrain - 1) / kDropGrain * kDropGrain);
  if (to + length <= size_ &&
      bytes_->MovePages(static_cast<size_t>(dropped_), static_cast<size_t>(to),
                        static_cast<size_t>(length))) {
    recycled_to_ = to + length;
  } else {
    bytes_->DropPages(static_cast<size_t>(dropped_), static_cast<size_t>(length));
  }
  dropped_ = grain_end;
}

absl::StatusOr<absl::string_view> HostBuffer::WaitLocked(int64_t bytes, absl::Time deadline,
                                                         const CancelledFn& cancelled) const {
  if (size_ >= 0) bytes = std::min(bytes, size_);
  const bool sized_by_fill = bytes == kWholeFill;
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return (arrived_ >= bytes && bytes_ != nullptr) || finished_;
  };
  while (true) {
    if (!status_.ok()) return status_;
    if (sized_by_fill && bytes_ != nullptr) bytes = arrived_;
    if (arrived_ >= bytes && bytes_ != nullptr) return absl::string_view(bytes_->data(), bytes);
    if (finished_) return absl::DataLossError("host buffer upload ended early");
    if (cancelled && cancelled()) return absl::CancelledError("the client went away");
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::NotFoundError(
          absl::StrCat("host buffer upload stalled at ", arrived_, " of ", size_, " bytes"));
    }
    Waiting waiting(&bytes_to_arrive);
    mutex_.AwaitWithTimeout(absl::Condition(&ready), std::min(left, kCancelPoll));
  }
}

absl::Status HostBufferBudget::Take(int64_t bytes) {
  absl::MutexLock lock(&mutex_);
  if (max_bytes_ > 0 && bytes > max_bytes_ - held_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a host buffer of ", bytes, " bytes would take the host buffers staged on this proxy ",
        "by all its sessions past ", max_bytes_, " bytes (--proxy_max_host_buffer_bytes; ", held_,
        " held)"));
  }
  held_ += bytes;
  return absl::OkStatus();
}

void HostBufferBudget::Give(int64_t bytes) {
  absl::MutexLock lock(&mutex_);
  held_ -= bytes;
}

int64_t HostBufferBudget::held() const {
  absl::MutexLock lock(&mutex_);
  return held_;
}

absl::Status HostBufferAccount::Take(int64_t bytes) {
  absl::MutexLock lock(&mutex_);
  if (max_bytes_ > 0 && bytes > max_bytes_ - bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a host buffer of ", bytes, " bytes would take this session's staged host buffers past ",
        max_bytes_, " bytes (--session_max_host_buffer_bytes; ", bytes_, " held)"));
  }
  if (budget_ != nullptr) SY_RETURN_IF_ERROR(budget_->Take(bytes));
  bytes_ += bytes;
  return absl::OkStatus();
}

void HostBufferAccount::Give(int64_t bytes) {
  absl::MutexLock lock(&mutex_);
  bytes_ -= bytes;
  if (budget_ != nullptr) budget_->Give(bytes);
}

int64_t HostBufferAccount::bytes() const {
  absl::MutexLock lock(&mutex_);
  return bytes_;
}

HostBufferBounds ResolveHostBufferBounds(int64_t session_flag, int64_t proxy_flag,
                                         int64_t memory_bytes) {
  auto share = [memory_bytes](int64_t percent) -> int64_t {
    if (memory_bytes <= 0) return 0;
    // In two parts: exact, and no overflow however large the memory.
    return memory_bytes / 100 * percent + memory_bytes % 100 * percent / 100;
  };
  HostBufferBounds bounds;
  bounds.session_max_bytes =
      session_flag >= 0 ? session_flag : share(limits::kSessionHostBufferMemoryPercent);
  bounds.proxy_max_bytes =
      proxy_flag >= 0 ? proxy_flag : share(limits::kProxyHostBufferMemoryPercent);
  return bounds;
}

absl::Status HostBufferStore::CheckNewLocked(uint64_t handle) const {
  if (shutdown_) return absl::FailedPreconditionError("session is shutting down");
  if (buffers_.count(handle) > 0) {
    return absl::AlreadyExistsError(absl::StrCat("host buffer ", handle, " already exists"));
  }
  return absl::OkStatus();
}

absl::Status HostBufferStore::Add(uint64_t handle, std::shared_ptr<HostBuffer> buffer) {
  absl::MutexLock lock(&mutex_);
  SY_RETURN_IF_ERROR(CheckNewLocked(handle));
  buffers_.emplace(handle, std::move(buffer));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<HostBuffer>> HostBufferStore::Begin(uint64_t handle, int64_t size,
                                                                   int64_t window) {
  {
    // Refused before anything is charged or allocated for it; `Add` checks again.
    absl::MutexLock lock(&mutex_);
    SY_RETURN_IF_ERROR(CheckNewLocked(handle));
  }
  const bool windowed = window > 0 && window < size;
  // A windowed one is charged its unread window now, the rest when its reader comes.
  const int64_t charge = windowed ? std::min(window, limits::kHostBufferUnreadWindowBytes) : size;
  SY_RETURN_IF_ERROR(account_->Take(charge));
  absl::StatusOr<std::unique_ptr<HostBytes>> space = HostBytes::Allocate(size);
  if (!space.ok()) {
    account_->Give(charge);
    return space.status();
  }
  auto buffer = std::make_shared<HostBuffer>(*std::move(space));
  buffer->Charge(account_, charge);  // given back when the buffer goes
  if (windowed) buffer->SetWindow(window);
  SY_RETURN_IF_ERROR(Add(handle, buffer));
  return buffer;
}

absl::StatusOr<std::shared_ptr<HostBuffer>> HostBufferStore::Expect(uint64_t handle, int64_t size) {
  auto buffer = std::make_shared<HostBuffer>(size, HostBuffer::InOnePiece{});
  SY_RETURN_IF_ERROR(account_->Take(buffer->size()));
  buffer->Charge(account_, buffer->size());
  SY_RETURN_IF_ERROR(Add(handle, buffer));
  return buffer;
}

absl::StatusOr<std::shared_ptr<const HostBuffer>> HostBufferStore::Lookup(
    uint64_t handle, absl::Duration timeout, const CancelledFn& cancelled) {
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
    Waiting waiting(&uploads_to_begin);
    mutex_.AwaitWithTimeout(absl::Condition(&arrived), std::min(left, kCancelPoll));
  }
}

absl::Status HostBufferStore::Claim(uint64_t handle) {
  std::shared_ptr<HostBuffer> claimed;  // let go (maybe unmapped) after the lock
  absl::MutexLock lock(&mutex_);
  auto it = buffers_.find(handle);
  if (it == buffers_.end()) {
    return absl::NotFoundError(absl::StrCat("host buffer ", handle, " not found"));
  }
  claimed = std::move(it->second);
  buffers_.erase(it);
  return absl::OkStatus();
}

absl::Status HostBufferStore::Delete(uint64_t handle) {
  std::shared_ptr<HostBuffer> buffer;
  {
    absl::MutexLock lock(&mutex_);
    auto it = buffers_.find(handle);
    if (it != buffers_.end()) buffer = it->second;
  }
  if (buffer != nullptr) buffer->Consumed();  // a writer held by its window goes on
  return Claim(handle);
}

uint64_t HostBufferStore::AddCall(std::function<void()> end) {
  absl::MutexLock lock(&mutex_);
  if (shutdown_) return 0;
  const uint64_t id = next_call_++;
  calls_.emplace(id, Call{std::move(end)});
  return id;
}

void HostBufferStore::RemoveCall(uint64_t id) {
  absl::MutexLock lock(&mutex_);
  calls_.erase(id);
}

void HostBufferStore::WaitsOnClient(uint64_t id, absl::Time since) {
  absl::MutexLock lock(&mutex_);
  auto it = calls_.find(id);
  if (it != calls_.end()) it->second.waiting_since = since;
}

void HostBufferStore::ClientAnswered(uint64_t id) { WaitsOnClient(id, absl::InfiniteFuture()); }

int HostBufferStore::EndStalledCalls(absl::Time now, absl::Duration limit) {
  absl::MutexLock lock(&mutex_);
  int ended = 0;
  for (auto it = calls_.begin(); it != calls_.end();) {
    if (now - it->second.waiting_since >= limit) {
      it->second.end();
      it = calls_.erase(it);
      ++ended;
    } else {
      ++it;
    }
  }
  return ended;
}

void HostBufferStore::Shutdown() {
  std::map<uint64_t, std::shared_ptr<HostBuffer>> buffers;
  {
    absl::MutexLock lock(&mutex_);
    shutdown_ = true;
    buffers.swap(buffers_);
    // Also the uploads a request took out of the store: their calls hold their bytes.
    for (auto& [id, call] : calls_) call.end();
    calls_.clear();
  }
  // Readers waiting on an upload that will not finish now learn so.
  for (auto& [handle, buffer] : buffers) buffer->Finish(absl::CancelledError("session ended"));
}

int64_t HostBufferStore::bytes() const { return account_->bytes(); }

}  // namespace switchyard::proxy
