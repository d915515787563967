#include "proxy/lane_stream.h"

#include "absl/time/clock.h"
#include "common/grpc_status.h"

namespace switchyard::proxy {

LaneStream::LaneStream(std::shared_ptr<grpc::ClientContext> context, OnAnswer on_answer,
                       OnEnd on_end)
    : context_(std::move(context)), on_answer_(std::move(on_answer)), on_end_(std::move(on_end)) {}

LaneStream::~LaneStream() {
  if (done()) return;
  Cancel();
  AwaitDone();
}

std::shared_ptr<LaneStream> LaneStream::Start(Worker::Stub* stub,
                                              std::shared_ptr<grpc::ClientContext> context,
                                              grpc::CompletionQueue* queue, OnAnswer on_answer,
                                              OnEnd on_end) {
  std::shared_ptr<LaneStream> stream(
      new LaneStream(std::move(context), std::move(on_answer), std::move(on_end)));
  stream->call_ = stub->PrepareAsyncDispatch(stream->context_.get(), queue);
  {
    absl::MutexLock lock(&stream->mutex_);
    // The start counts as a write: posts queue behind it (`writing_` starts true).
    stream->write_started_ns_ = absl::GetCurrentTimeNanos();
  }
  stream->call_->StartCall(CompletionPool::Arm(&stream->started_));
  return stream;
}

void LaneStream::OnStarted(bool ok) {
  {
    absl::MutexLock lock(&mutex_);
    writing_ = false;
    write_started_ns_ = 0;
    if (!ok) {  // the call is dead: no read; its finish says why
      failed_ = reads_ended_ = true;
      queue_.clear();
    }
  }
  if (ok) call_->Read(&answer_, CompletionPool::Arm(&read_));
  Pump();
}

void LaneStream::OnRead(bool ok) {
  if (ok) {
    on_answer_(answer_);
    answer_.Clear();
    call_->Read(&answer_, CompletionPool::Arm(&read_));
    return;
  }
  {
    absl::MutexLock lock(&mutex_);
    failed_ = reads_ended_ = true;  // the stream is ending: nothing more goes out
    queue_.clear();
  }
  Pump();
}

void LaneStream::OnWritten(bool ok) {
  {
    absl::MutexLock lock(&mutex_);
    writing_ = false;
    write_started_ns_ = 0;
    writing_op_.Clear();
    if (!ok) {
      failed_ = true;
      queue_.clear();
    }
  }
  Pump();
}

void LaneStream::Pump() {
  enum { kNothing, kWrite, kHalfClose, kFinish } action = kNothing;
  {
    absl::MutexLock lock(&mutex_);
    if (writing_ || finishing_) return;
    if (!failed_ && !queue_.empty()) {
      writing_op_ = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
      write_started_ns_ = absl::GetCurrentTimeNanos();
      action = kWrite;
    } else if (!failed_ && half_close_ && !half_closed_) {
      half_closed_ = writing_ = true;
      action = kHalfClose;
    } else if (reads_ended_) {
      // gRPC's Finish comes alone: no read nor write in progress.
      finishing_ = true;
      action = kFinish;
    }
  }
  // Outside the lock (gRPC takes its own; completions come on the queue's thread, never
  // here). `writing_` or `finishing_` makes this thread the only one starting anything.
  switch (action) {
    case kWrite:
      call_->Write(writing_op_, CompletionPool::Arm(&written_));
      break;
    case kHalfClose:
      call_->WritesDone(CompletionPool::Arm(&written_));
      break;
    case kFinish:
      call_->Finish(&status_, CompletionPool::Arm(&finished_));
      break;
    case kNothing:
      break;
  }
}

void LaneStream::OnFinished(bool) {
  on_end_(FromGrpcStatus(status_));
  ended_.Notify();  // the last touch: the owner may destroy the stream from now on
}

bool LaneStream::Post(DispatchRequest op, bool* claimed) {
  {
    absl::MutexLock lock(&mutex_);
    if (claimed != nullptr) *claimed = false;
    if (failed_ || half_close_) return false;
    queue_.push_back(std::move(op));
    if (writing_) return true;  // its completion starts the next
    if (claimed != nullptr) {
      *claimed = true;
      return true;
    }
  }
  Pump();
  return true;
}

int64_t LaneStream::write_started_ns() const {
  absl::MutexLock lock(&mutex_);
  return write_started_ns_;
}

bool LaneStream::AwaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mutex_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return (queue_.empty() && !writing_) || failed_;
  };
  return mutex_.AwaitWithTimeout(absl::Condition(&idle), timeout) && queue_.empty() && !writing_;
}

void LaneStream::CloseWrites() {
  {
    absl::MutexLock lock(&mutex_);
    half_close_ = true;
  }
  Pump();
}

}  // namespace switchyard::proxy
