#pragma once

// One lane's `Worker.Dispatch` stream, driven by gRPC's async API on a queue of a
// CompletionPool (common/completion_pool.h): it has no thread of its own, so a proxy's
// threads do not grow with the hosts it drives (docs/scale.md). Operations go out in
// the order they are posted, one write at a time; posting never blocks (a write starts
// on the poster's thread when the stream is idle, one thread handoff fewer). Answers are
// handed to `on_answer` as they come, one at a time, and `on_end` runs once the stream
// has ended, with its status; both on the queue's thread, so they must not block.
// Thread-safe.

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/completion_pool.h"
#include "switchyard/worker.grpc.pb.h"

namespace switchyard::proxy {

class LaneStream {
 public:
  using OnAnswer = std::function<void(DispatchResponse& answer)>;
  using OnEnd = std::function<void(absl::Status finished)>;

  // Opens the stream on `stub` with `context` (its metadata set), bound to `queue`
  // (which must outlive it: every stream ends before its pool goes). Never blocks: a
  // worker not reached yet gets what is posted once it is. The stream is its owner's to
  // keep until it has ended (done()); gRPC's threads never hold it, so it goes away on
  // the owner's thread, with the call and the context.
  static std::shared_ptr<LaneStream> Start(Worker::Stub* stub,
                                           std::shared_ptr<grpc::ClientContext> context,
                                           grpc::CompletionQueue* queue, OnAnswer on_answer,
                                           OnEnd on_end);
  // Cancels the stream and waits for its end if it has not ended.
  ~LaneStream();
  LaneStream(const LaneStream&) = delete;
  LaneStream& operator=(const LaneStream&) = delete;

  // Queues `op`; never blocks. False once the stream failed or was half-closed. When
  // nothing was being written, the write starts here, or, with `claimed`, `*claimed` is
  // set and the caller is to call StartClaimed once it has let go of its locks (one
  // thread handoff fewer, and no gRPC work under the caller's locks).
  bool Post(DispatchRequest op, bool* claimed = nullptr) ABSL_LOCKS_EXCLUDED(mutex_);
  // After a claiming Post: starts the write (or finds it started). Never blocks.
  void StartClaimed() ABSL_LOCKS_EXCLUDED(mutex_) { Pump(); }
  // When the write in progress (or the call's start) began (absl::GetCurrentTimeNanos);
  // 0 if none. A worker that stopped reading holds it (CheckStall).
  int64_t write_started_ns() const ABSL_LOCKS_EXCLUDED(mutex_);
  // Waits up to `timeout` until nothing is queued or being written; true if so.
  bool AwaitIdle(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mutex_);
  // After what is queued: the half-close (the worker carries everything out, then ends
  // the stream). Posts fail from now on.
  void CloseWrites() ABSL_LOCKS_EXCLUDED(mutex_);
  // Ends the stream now: what is in progress fails, and it ends.
  void Cancel() { context_->TryCancel(); }
  // Waits until `on_end` has returned; the stream may go away from then on.
  void AwaitDone() { ended_.WaitForNotification(); }
  bool done() const { return ended_.HasBeenNotified(); }

 private:
  using Call = grpc::ClientAsyncReaderWriter<DispatchRequest, DispatchResponse>;
  // One kind of operation's tag: its completion runs `handler`.
  struct Event final : CompletionPool::Tag {
    Event(LaneStream* stream, void (LaneStream::*handler)(bool))
        : stream(stream), handler(handler) {}
    void Completed(bool ok) override { (stream->*handler)(ok); }
    LaneStream* const stream;
    void (LaneStream::*const handler)(bool);
  };

  LaneStream(std::shared_ptr<grpc::ClientContext> context, OnAnswer on_answer, OnEnd on_end);
  void OnStarted(bool ok) ABSL_LOCKS_EXCLUDED(mutex_);
  void OnRead(bool ok) ABSL_LOCKS_EXCLUDED(mutex_);
  void OnWritten(bool ok) ABSL_LOCKS_EXCLUDED(mutex_);
  void OnFinished(bool ok) ABSL_LOCKS_EXCLUDED(mutex_);
  // Starts what comes next, as the state says: the next write, or the half-close, or,
  // once reads have ended and nothing is being written, the call's finish. One thing at
  // a time besides the read: `writing_` makes the thread that set it the one to start.
  void Pump() ABSL_LOCKS_EXCLUDED(mutex_);

  const std::shared_ptr<grpc::ClientContext> context_;  // outlives `call_`
  const OnAnswer on_answer_;
  const OnEnd on_end_;
  std::unique_ptr<Call> call_;
  Event started_{this, &LaneStream::OnStarted};
  Event read_{this, &LaneStream::OnRead};
  Event written_{this, &LaneStream::OnWritten};  // a write's, or the half-close's
  Event finished_{this, &LaneStream::OnFinished};
  DispatchResponse answer_;  // the read in progress (one at a time)
  grpc::Status status_;      // the call's, once finished

  mutable absl::Mutex mutex_;
  std::deque<DispatchRequest> queue_ ABSL_GUARDED_BY(mutex_);
  // The write in progress, kept until it is done; touched only by the thread that set
  // `writing_` for it, and by the write's completion.
  DispatchRequest writing_op_;
  int64_t write_started_ns_ ABSL_GUARDED_BY(mutex_) = 0;
  bool writing_ ABSL_GUARDED_BY(mutex_) = true;       // the start, a write or the half-close
  bool failed_ ABSL_GUARDED_BY(mutex_) = false;       // a write, the start or the reads failed
  bool reads_ended_ ABSL_GUARDED_BY(mutex_) = false;  // no read in progress, none to come
  bool half_close_ ABSL_GUARDED_BY(mutex_) = false;   // asked for: after the queue
  bool half_closed_ ABSL_GUARDED_BY(mutex_) = false;  // started
  bool finishing_ ABSL_GUARDED_BY(mutex_) = false;
  // Notified last thing on gRPC's side: safe to destroy once it is (absl::Notification).
  absl::Notification ended_;
};

}  // namespace switchyard::proxy
