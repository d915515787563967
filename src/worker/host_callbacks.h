#pragma once

// Host callbacks on a worker (proto/switchyard/host_callback.proto): calls a launch
// makes to Python functions in the client that compiled it. Each call goes up the
// Dispatch stream the launch came from, and the device thread that made it waits until
// the proxy returns the result (Return), the stream ends (its calls fail), or
// kHostCallbackWaitMs passes. CPU plugins only: the call's operands are read, and its
// results written, in host memory. Thread-safe.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "pjrt/pjrt.h"
#include "switchyard/worker.pb.h"

namespace switchyard::worker {

class HostCallbacks {
 public:
  // Routes JAX's callback custom calls in `plugin`'s programs to launches' contexts.
  // UNIMPLEMENTED where that cannot work (no FFI extension; not a CPU plugin).
  static absl::StatusOr<std::unique_ptr<HostCallbacks>> Create(const pjrt::Plugin& plugin,
                                                               const std::string& platform);

  // One Dispatch stream's way up to its proxy. `send` returns false once the stream
  // has ended; so does everything after `Close`.
  class Stream {
   public:
    using Send = std::function<bool(const DispatchResponse&)>;
    bool Post(const HostCallbackCall& call) ABSL_LOCKS_EXCLUDED(mutex_);
    // The stream has ended: calls sent through it fail now, later ones at once.
    void Close() ABSL_LOCKS_EXCLUDED(mutex_);
    // Whether the peer has gone, though nobody has read the stream's end yet (its
    // reader may be the thread blocked in the call).
    bool Gone() ABSL_LOCKS_EXCLUDED(mutex_);

   private:
    friend class HostCallbacks;
    Stream(HostCallbacks* owner, uint64_t id, Send send, std::function<bool()> gone)
        : owner_(owner), id_(id), send_(std::move(send)), gone_(std::move(gone)) {}

    HostCallbacks* const owner_;
    const uint64_t id_;
    absl::Mutex mutex_;
    Send send_ ABSL_GUARDED_BY(mutex_);
    std::function<bool()> gone_ ABSL_GUARDED_BY(mutex_);  // cleared by Close
  };
  // `gone` (may be null) says whether the stream's peer has gone; it is not called
  // after Close.
  std::shared_ptr<Stream> NewStream(Stream::Send send, std::function<bool()> gone = nullptr)
      ABSL_LOCKS_EXCLUDED(mutex_);

  // The context for one launch of an executable whose functions its client serves
  // under `key`; the launch's calls go up `stream` and run `Handler(key, stream)`.
  absl::StatusOr<std::unique_ptr<pjrt::ExecuteContext>> ContextFor(const std::string& key,
                                                                   std::shared_ptr<Stream> stream);
  pjrt::FfiCallHandler Handler(const std::string& key, std::shared_ptr<Stream> stream);

  // A result from the proxy. NOT_FOUND if no call `result.call_id` waits.
  absl::Status Return(const HostCallbackResult& result) ABSL_LOCKS_EXCLUDED(mutex_);

  int64_t waiting() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  struct Waiting;
  explicit HostCallbacks(pjrt::Ffi ffi) : ffi_(ffi) {}
  absl::Status Call(const std::string& key, Stream& stream, pjrt::FfiCall& call)
      ABSL_LOCKS_EXCLUDED(mutex_);
  void FailStream(uint64_t stream_id) ABSL_LOCKS_EXCLUDED(mutex_);

  const pjrt::Ffi ffi_;
  mutable absl::Mutex mutex_;
  uint64_t next_call_ ABSL_GUARDED_BY(mutex_) = 1;
  uint64_t next_stream_ ABSL_GUARDED_BY(mutex_) = 1;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Waiting>> waiting_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace switchyard::worker
