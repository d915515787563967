#pragma once

// Where a session's responses go: its client stream. Shared with answers that come
// later from other threads (a CheckValueReady answered when the workers say so), and
// closed when the stream ends, after which late answers are dropped. Thread-safe.

#include <functional>

#include "absl/synchronization/mutex.h"
#include "ifrt/ifrt_service.pb.h"

namespace switchyard::proxy {

class ResponseSink {
 public:
  using WriteFn = std::function<bool(const ::xla::ifrt::proxy::IfrtResponse&)>;
  explicit ResponseSink(WriteFn write) : write_(std::move(write)) {}

  // False once closed or when the stream has failed.
  bool Write(const ::xla::ifrt::proxy::IfrtResponse& response) ABSL_LOCKS_EXCLUDED(mutex_) {
    absl::MutexLock lock(&mutex_);
    return write_ != nullptr && write_(response);
  }
  void Close() ABSL_LOCKS_EXCLUDED(mutex_) {
    absl::MutexLock lock(&mutex_);
    write_ = nullptr;
  }

 private:
  absl::Mutex mutex_;
  WriteFn write_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace switchyard::proxy
