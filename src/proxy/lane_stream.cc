#include "proxy/lane_stream.h"

#include "absl/time/clock.h"
#include "common/grpc_status.h"

namespace switchyard::proxy {

std::shared_ptr<LaneStream> LaneStream::Start(Worker::Stub* stub,
                                              std::shared_ptr<grpc::ClientContext> context,
                                              OnAnswer on_answer, OnEnd on_end) {
  std::shared_ptr<LaneStream> stream(
      new LaneStream(std::move(context), std::move(on_answer), std::move(on_end)));
  {
    absl::MutexLock lock(&stream->mutex_);
    stream->self_ = stream;
  }
  stub->async()->Dispatch(stream->context_.get(), stream.get());
  // Writes start from any thread, not only from reactions: the hold keeps the call from
  // ending under one, until no write will come (Pump).
  stream->AddHold();
  stream->StartRead(&stream->answer_);
  stream->StartCall();
  return stream;
}

bool LaneStream::Post(DispatchRequest op) {
  {
    absl::MutexLock lock(&mutex_);
    if (failed_ || half_close_ || released_) return false;
    queue_.push_back(std::move(op));
    if (writing_) return true;  // OnWriteDone takes it
  }
  Pump();
  return true;
}

void LaneStream::Pump() {
  enum { kNothing, kWrite, kHalfClose, kRelease } action = kNothing;
  {
    absl::MutexLock lock(&mutex_);
    if (writing_ || released_) return;
    if (failed_) {
      released_ = true;
      action = kRelease;
    } else if (!queue_.empty()) {
      writing_op_ = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
      write_started_ns_ = absl::GetCurrentTimeNanos();
      action = kWrite;
    } else if (half_close_) {
      released_ = true;
      action = kHalfClose;
    }
  }
  // Outside the lock: a reaction may run on this thread. `writing_` (or `released_`)
  // makes this thread the only one to start anything now.
  switch (action) {
    case kWrite:
      StartWrite(&writing_op_);
      break;
    case kHalfClose:
      StartWritesDone();
      RemoveHold();
      break;
    case kRelease:
      RemoveHold();
      break;
    case kNothing:
      break;
  }
}

void LaneStream::OnWriteDone(bool ok) {
  {
    absl::MutexLock lock(&mutex_);
    writing_ = false;
    write_started_ns_ = 0;
    if (!ok) {
      failed_ = true;
      queue_.clear();
    }
  }
  Pump();
}

void LaneStream::OnReadDone(bool ok) {
  if (ok) {
    on_answer_(answer_);
    answer_.Clear();
    StartRead(&answer_);
    return;
  }
  {
    absl::MutexLock lock(&mutex_);
    failed_ = true;  // the stream is ending: nothing more goes out
    queue_.clear();
  }
  Pump();
}

void LaneStream::OnDone(const grpc::Status& status) {
  on_end_(FromGrpcStatus(status));
  std::shared_ptr<LaneStream> keep;  // may be the last reference: released on return
  absl::MutexLock lock(&mutex_);
  done_ = true;
  keep = std::move(self_);
}

int64_t LaneStream::write_started_ns() const {
  absl::MutexLock lock(&mutex_);
  return write_started_ns_;
}

bool LaneStream::AwaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mutex_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return (queue_.empty() && !writing_) || failed_ || released_;
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

void LaneStream::AwaitDone() {
  absl::MutexLock lock(&mutex_);
  mutex_.Await(absl::Condition(&done_));
}

bool LaneStream::done() const {
  absl::MutexLock lock(&mutex_);
  return done_;
}

}  // namespace switchyard::proxy
