#pragma once

// One lane's `Worker.Dispatch` stream, driven by gRPC's callbacks: it has no thread of its
// own, so a proxy's threads do not grow with the hosts it drives (docs/scale.md).
// Operations go out in the order they are posted, one write at a time; posting never
// blocks. Answers are handed to `on_answer` as they come, and `on_end` runs once the
// stream has ended, with its status; both on gRPC's callback threads, so they must not
// block. Thread-safe.

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "switchyard/worker.grpc.pb.h"

namespace switchyard::proxy {

class LaneStream final : public grpc::ClientBidiReactor<DispatchRequest, DispatchResponse> {
 public:
  using OnAnswer = std::function<void(DispatchResponse& answer)>;
  using OnEnd = std::function<void(absl::Status finished)>;

  // Opens the stream on `stub` with `context` (its metadata set; it must outlive the
  // stream: keep it until AwaitDone returns). The stream keeps itself alive until it ends.
  static std::shared_ptr<LaneStream> Start(Worker::Stub* stub,
                                           std::shared_ptr<grpc::ClientContext> context,
                                           OnAnswer on_answer, OnEnd on_end);

  // Queues `op`; never blocks. False once the stream failed or was half-closed.
  bool Post(DispatchRequest op) ABSL_LOCKS_EXCLUDED(mutex_);
  // When the write in progress started (absl::GetCurrentTimeNanos); 0 if none.
  int64_t write_started_ns() const ABSL_LOCKS_EXCLUDED(mutex_);
  // Waits up to `timeout` until nothing is queued or being written; true if so.
  bool AwaitIdle(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mutex_);
  // After what is queued: the half-close (the worker carries everything out, then ends
  // the stream). Posts fail from now on.
  void CloseWrites() ABSL_LOCKS_EXCLUDED(mutex_);
  void Cancel() { context_->TryCancel(); }
  // Waits until `on_end` has returned.
  void AwaitDone() ABSL_LOCKS_EXCLUDED(mutex_);
  bool done() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  LaneStream(std::shared_ptr<grpc::ClientContext> context, OnAnswer on_answer, OnEnd on_end)
      : context_(std::move(context)),
        on_answer_(std::move(on_answer)),
        on_end_(std::move(on_end)) {}
  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mutex_);
  void OnReadDone(bool ok) override ABSL_LOCKS_EXCLUDED(mutex_);
  void OnWritesDoneDone(bool ok) override {}
  void OnDone(const grpc::Status& status) override ABSL_LOCKS_EXCLUDED(mutex_);
  // Starts the next write, or the half-close, or lets the stream end (its hold) once no
  // write will come, as the state says; never while a write is in progress.
  void Pump() ABSL_LOCKS_EXCLUDED(mutex_);

  const std::shared_ptr<grpc::ClientContext> context_;
  const OnAnswer on_answer_;
  const OnEnd on_end_;
  DispatchResponse answer_;  // the read in progress (one at a time)

  mutable absl::Mutex mutex_;
  std::deque<DispatchRequest> queue_ ABSL_GUARDED_BY(mutex_);
  DispatchRequest writing_op_ ABSL_GUARDED_BY(mutex_);  // kept until its write is done
  int64_t write_started_ns_ ABSL_GUARDED_BY(mutex_) = 0;
  bool writing_ ABSL_GUARDED_BY(mutex_) = false;
  bool failed_ ABSL_GUARDED_BY(mutex_) = false;      // a write or the reads ended
  bool half_close_ ABSL_GUARDED_BY(mutex_) = false;  // asked for: after the queue
  bool released_ ABSL_GUARDED_BY(mutex_) = false;    // no write starts from now on
  bool done_ ABSL_GUARDED_BY(mutex_) = false;
  std::shared_ptr<LaneStream> self_ ABSL_GUARDED_BY(mutex_);  // until OnDone
};

}  // namespace switchyard::proxy
