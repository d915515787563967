#pragma once

// One session's host buffers: bytes the client uploads (for arrays it creates) and
// bytes we prepare for it to download. An upload is usable while it arrives, so the
// proxy can forward it to a worker without waiting for the last byte. Thread-safe:
// the session stream and the host-buffer RPCs run on different threads.

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/host_bytes.h"

namespace switchyard::proxy {

// Says whether the reader's client has gone; waits check it every 100 ms.
using CancelledFn = std::function<bool()>;

class HostBufferAccount;

// The waits on host buffers in progress in this process (for /metrics, and for tests to
// know a request is waiting rather than sleep): requests waiting for an upload to begin
// (`HostBufferStore::Lookup`), and readers waiting for bytes still on their way
// (`HostBuffer::WaitFor`: a forward to a worker, or a client's fetch).
struct HostBufferWaits {
  int64_t uploads_to_begin = 0;
  int64_t bytes_to_arrive = 0;
};
HostBufferWaits CurrentHostBufferWaits();

class HostBuffer {
 public:
  // Arriving into `space` (HostBytes::Allocate): its size in bytes are appended in
  // order, then `Finish`.
  explicit HostBuffer(std::unique_ptr<HostBytes> space);
  ~HostBuffer();
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  // Arriving in one piece: `size` bytes made elsewhere, handed over by `Fill` (or
  // failed by `Finish`).
  struct InOnePiece {};
  HostBuffer(int64_t size, InOnePiece);
  // In one piece, of a size known only then (a string array's contents): `size()` is 0,
  // and only `WaitAll` reads it.
  static constexpr int64_t kSizedByFill = -1;

  int64_t size() const { return size_ < 0 ? 0 : size_; }
  // DATA_LOSS past the declared size.
  absl::Status Append(absl::string_view bytes) ABSL_LOCKS_EXCLUDED(mutex_);
  // For the one writer of a buffer arriving in place, instead of `Append`: its whole
  // space, which the writer fills from the start and then says, with `Arrived`, how many
  // bytes from the start hold data (never fewer than before).
  absl::Span<char> Space() ABSL_LOCKS_EXCLUDED(mutex_);
  absl::Status Arrived(int64_t bytes) ABSL_LOCKS_EXCLUDED(mutex_);
  // Ends the upload; a short one or `status` fails every reader.
  void Finish(absl::Status status = absl::OkStatus()) ABSL_LOCKS_EXCLUDED(mutex_);
  // Completes a buffer arriving in one piece; DATA_LOSS for the wrong size (any size
  // for kSizedByFill, charged then: RESOURCE_EXHAUSTED past a bound).
  absl::Status Fill(std::unique_ptr<HostBytes> data) ABSL_LOCKS_EXCLUDED(mutex_);

  // The first `bytes` bytes (at most `size()`), once they have arrived. NOT_FOUND
  // past `deadline`, CANCELLED if `cancelled()`, the upload's error if it failed.
  // Closes the window (below) for good: FAILED_PRECONDITION if its start was dropped,
  // RESOURCE_EXHAUSTED if its account cannot take the whole size.
  absl::StatusOr<absl::string_view> WaitFor(int64_t bytes, absl::Time deadline,
                                            const CancelledFn& cancelled = nullptr) const
      ABSL_LOCKS_EXCLUDED(mutex_);
  // All of it.
  absl::StatusOr<absl::string_view> WaitAll(absl::Time deadline,
                                            const CancelledFn& cancelled = nullptr) const {
    return WaitFor(size_ < 0 ? kWholeFill : size_, deadline, cancelled);
  }
  // Once the writer has finished: OK if every byte came, else why not. UNAVAILABLE before.
  absl::Status Completion() const ABSL_LOCKS_EXCLUDED(mutex_);

  // What its account holds for it now (the store charges it: `HostBufferStore::Begin`).
  int64_t charged() const ABSL_LOCKS_EXCLUDED(mutex_);
  // For the writer, before it writes the bytes up to `end`: waits for room in the
  // window (always there when nothing is outstanding), and charges what the buffer will
  // hold then past its charge. NOT_FOUND past `deadline`, CANCELLED if `cancelled()`,
  // RESOURCE_EXHAUSTED past a bound (a chunk far larger than the window).
  absl::Status WaitRoom(int64_t end, absl::Time deadline, const CancelledFn& cancelled = nullptr)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // For the one reader streaming the buffer on: `WaitFor` leaving the window open.
  absl::StatusOr<absl::string_view> StreamFor(int64_t bytes, absl::Time deadline,
                                              const CancelledFn& cancelled = nullptr) const
      ABSL_LOCKS_EXCLUDED(mutex_);
  // That reader passed on the bytes [offset, end); those before the first byte not
  // passed on are no longer held. A no-op without a window.
  void Sent(int64_t offset, int64_t end) const ABSL_LOCKS_EXCLUDED(mutex_);
  // Whether some of its start is no longer held (it cannot be read again from byte 0).
  bool dropped_any() const ABSL_LOCKS_EXCLUDED(mutex_);
  // Makes the caller the one streaming reader of a windowed buffer: false when another
  // reader took it first. True for a buffer without a window (any number may read).
  // The window widens from the unread one to its own when its account has room.
  bool TakeReader() const ABSL_LOCKS_EXCLUDED(mutex_);
  // No reader is left: with the window open, what still arrives is dropped.
  void Consumed() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  // Only the store charges a buffer and sets its window, so neither comes without the other.
  friend class HostBufferStore;
  // A window (an upload larger than `window`; set before its first byte): the writer
  // keeps at most `window` bytes ahead of what its one streaming reader passed on
  // (`Sent`), whose pages are given back, so the proxy holds a window of the upload,
  // not all of it; until that reader comes (`TakeReader`), at most
  // limits::kHostBufferUnreadWindowBytes. The window closes for good (the writer goes
  // on unbounded) once a reader asks with `WaitFor`, which needs the whole buffer
  // (strided, or cut into shards), and opens wide (what still arrives is dropped) once
  // `Consumed` says no reader is left.
  void SetWindow(int64_t window) ABSL_LOCKS_EXCLUDED(mutex_);
  // Charges `bytes` of it to `account` now (set once, before any reader), the rest of
  // its size once its window closes (or, sized by its fill, at `Fill`); all given back
  // when the buffer is destroyed, wherever it is held then.
  void Charge(std::shared_ptr<HostBufferAccount> account, int64_t bytes)
      ABSL_LOCKS_EXCLUDED(mutex_);

  static constexpr int64_t kWholeFill = std::numeric_limits<int64_t>::max();
  absl::StatusOr<absl::string_view> WaitLocked(int64_t bytes, absl::Time deadline,
                                               const CancelledFn& cancelled) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Gives back the pages before `upto` (in whole grains) of a windowed buffer.
  void DropLocked(int64_t upto) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  bool windowed() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return window_ > 0 && !whole_; }
  const int64_t size_;
  mutable absl::Mutex mutex_;
  // An upload written in place as it arrives (only the first `arrived_` bytes are
  // written), or bytes handed over whole; null until then for one arriving in one piece.
  std::unique_ptr<HostBytes> bytes_ ABSL_GUARDED_BY(mutex_);
  int64_t arrived_ ABSL_GUARDED_BY(mutex_) = 0;
  bool finished_ ABSL_GUARDED_BY(mutex_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mutex_);
  // The window (see SetWindow) now, and once its reader came; readers change it, hence
  // mutable.
  mutable int64_t window_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t reader_window_ ABSL_GUARDED_BY(mutex_) = 0;
  mutable bool whole_ ABSL_GUARDED_BY(mutex_) = false;
  mutable bool consumed_ ABSL_GUARDED_BY(mutex_) = false;
  mutable std::map<int64_t, int64_t> sent_
      ABSL_GUARDED_BY(mutex_);  // offset -> end, past sent_prefix_
  mutable int64_t sent_prefix_ ABSL_GUARDED_BY(mutex_) = 0;
  mutable int64_t dropped_ ABSL_GUARDED_BY(mutex_) = 0;      // pages before it given back
  mutable int64_t recycled_to_ ABSL_GUARDED_BY(mutex_) = 0;  // pages moved ahead end here
  // The writer writes nothing past this (its last `WaitRoom`), with or without the lock.
  int64_t granted_ ABSL_GUARDED_BY(mutex_) = 0;
  mutable bool reader_taken_ ABSL_GUARDED_BY(mutex_) = false;
  std::shared_ptr<HostBufferAccount> account_ ABSL_GUARDED_BY(mutex_);
  mutable int64_t charged_ ABSL_GUARDED_BY(mutex_) = 0;
};

// The bytes of host buffers all sessions of one proxy may hold at once, so that clients
// together cannot stage more than the proxy's host has. A leaf lock: stores take it under
// their own. Thread-safe.
class HostBufferBudget {
 public:
  // `max_bytes` 0: no bound.
  explicit HostBufferBudget(int64_t max_bytes) : max_bytes_(max_bytes) {}
  // RESOURCE_EXHAUSTED, naming the bound, when `bytes` more would pass it.
  absl::Status Take(int64_t bytes) ABSL_LOCKS_EXCLUDED(mutex_);
  void Give(int64_t bytes) ABSL_LOCKS_EXCLUDED(mutex_);
  int64_t held() const ABSL_LOCKS_EXCLUDED(mutex_);
  int64_t max_bytes() const { return max_bytes_; }

 private:
  const int64_t max_bytes_;
  mutable absl::Mutex mutex_;
  int64_t held_ ABSL_GUARDED_BY(mutex_) = 0;
};

// What one session's host buffers hold, bounded alone and, through the budget, with
// every other session's. Each buffer holds its charge until it is destroyed, also
// after its request took it out of the store (so a put still reading it counts), and
// a windowed one only its window until a reader needs it whole. A leaf lock over the
// budget's. Thread-safe.
class HostBufferAccount {
 public:
  // `max_bytes` 0: no bound; `budget` may be null.
  HostBufferAccount(int64_t max_bytes, std::shared_ptr<HostBufferBudget> budget)
      : max_bytes_(max_bytes), budget_(std::move(budget)) {}
  // RESOURCE_EXHAUSTED, naming the bound, when `bytes` more would pass either.
  absl::Status Take(int64_t bytes) ABSL_LOCKS_EXCLUDED(mutex_);
  void Give(int64_t bytes) ABSL_LOCKS_EXCLUDED(mutex_);
  int64_t bytes() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  const int64_t max_bytes_;
  const std::shared_ptr<HostBufferBudget> budget_;
  mutable absl::Mutex mutex_;
  int64_t bytes_ ABSL_GUARDED_BY(mutex_) = 0;
};

// The bounds on staged host buffers a proxy starts with.
struct HostBufferBounds {
  int64_t session_max_bytes = 0;  // one session's; 0: none
  int64_t proxy_max_bytes = 0;    // all sessions' together; 0: none
};
// The operator's bounds (a flag's value; negative: not given), else shares of
// `memory_bytes` (limits::kSessionHostBufferMemoryPercent and
// kProxyHostBufferMemoryPercent; no bound when the machine does not say its memory).
HostBufferBounds ResolveHostBufferBounds(int64_t session_flag, int64_t proxy_flag,
                                         int64_t memory_bytes);

class HostBufferStore {
 public:
  // `max_bytes`: the most the session's buffers may hold at once (uploads and
  // downloads until the last holder lets go); 0: no bound. `budget`, when given, bounds
  // them together with other sessions' (shared; it outlives the buffers).
  explicit HostBufferStore(int64_t max_bytes = 0,
                           std::shared_ptr<HostBufferBudget> budget = nullptr)
      : account_(std::make_shared<HostBufferAccount>(max_bytes, std::move(budget))) {}
  HostBufferStore(const HostBufferStore&) = delete;
  HostBufferStore& operator=(const HostBufferStore&) = delete;

  // An upload of `size` bytes about to arrive; visible to `Lookup` at once. With a
  // `window` (HostBuffer::SetWindow; 0: none) only the window is charged (its unread
  // one until its streaming reader comes) until a reader needs the buffer whole.
  // ALREADY_EXISTS for a handle in use; FAILED_PRECONDITION after `Shutdown`;
  // RESOURCE_EXHAUSTED past a bound (all three for `Expect` too).
  absl::StatusOr<std::shared_ptr<HostBuffer>> Begin(uint64_t handle, int64_t size,
                                                    int64_t window = 0) ABSL_LOCKS_EXCLUDED(mutex_);
  // A buffer of `size` bytes to come in one piece (`HostBuffer::Fill`); visible to
  // `Lookup` at once.
  absl::StatusOr<std::shared_ptr<HostBuffer>> Expect(uint64_t handle, int64_t size)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Waits up to `timeout` for the handle to appear (complete or still arriving).
  // NOT_FOUND when it does not; CANCELLED if the store shuts down or `cancelled()`
  // turns true meanwhile.
  absl::StatusOr<std::shared_ptr<const HostBuffer>> Lookup(uint64_t handle, absl::Duration timeout,
                                                           const CancelledFn& cancelled = nullptr)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // NOT_FOUND for an unknown handle. No one will read it: an upload still arriving
  // drops the rest (HostBuffer::Consumed).
  absl::Status Delete(uint64_t handle) ABSL_LOCKS_EXCLUDED(mutex_);
  // Takes a buffer out of the store for the request that names it (its reader, which
  // looked it up and holds it from now, charge and all); NOT_FOUND for an unknown handle.
  absl::Status Claim(uint64_t handle) ABSL_LOCKS_EXCLUDED(mutex_);
  // An RPC that moves one of its buffers (an upload arriving, a fetch's lookup going
  // out), ended by `Shutdown` (`end`, e.g. a TryCancel of its call): a client that keeps
  // it open (silent, or not reading) after its session ended must not keep what it
  // staged. `end` runs under the store's lock, so it is never called after `RemoveCall`
  // returns. Returns an id for that; 0 (and `end` is not kept) after `Shutdown`.
  uint64_t AddCall(std::function<void()> end) ABSL_LOCKS_EXCLUDED(mutex_);
  void RemoveCall(uint64_t id) ABSL_LOCKS_EXCLUDED(mutex_);
  // Call `id` waits on its client from `since` (a read of the upload's next chunk, a
  // write of the fetch's next one), until ClientAnswered. Unknown ids are ignored.
  void WaitsOnClient(uint64_t id, absl::Time since) ABSL_LOCKS_EXCLUDED(mutex_);
  void ClientAnswered(uint64_t id) ABSL_LOCKS_EXCLUDED(mutex_);
  // Ends (`end`, and forgets) the calls that have waited on their client for `limit` or
  // longer at `now`: a client that neither sends nor reads would otherwise hold a server
  // thread and the bytes it staged for as long as its session lives. Returns how many.
  int EndStalledCalls(absl::Time now, absl::Duration limit) ABSL_LOCKS_EXCLUDED(mutex_);
  // Wakes every waiter and ends every call (AddCall); later stores fail.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mutex_);

  int64_t bytes() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  // FAILED_PRECONDITION after `Shutdown`, ALREADY_EXISTS for a handle in use.
  absl::Status CheckNewLocked(uint64_t handle) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Makes a buffer (charged already) visible.
  absl::Status Add(uint64_t handle, std::shared_ptr<HostBuffer> buffer) ABSL_LOCKS_EXCLUDED(mutex_);

  const std::shared_ptr<HostBufferAccount> account_;
  mutable absl::Mutex mutex_;
  std::map<uint64_t, std::shared_ptr<HostBuffer>> buffers_ ABSL_GUARDED_BY(mutex_);
  struct Call {
    std::function<void()> end;
    absl::Time waiting_since = absl::InfiniteFuture();  // on its client; or not
  };
  std::map<uint64_t, Call> calls_ ABSL_GUARDED_BY(mutex_);
  uint64_t next_call_ ABSL_GUARDED_BY(mutex_) = 1;
  bool shutdown_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace switchyard::proxy
