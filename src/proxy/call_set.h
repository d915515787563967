#pragma once

// Calls in flight that someone may need to stop: a session that ends cancels the
// worker reads it started on other threads (and the data-plane reads that follow them
// ask `cancelled`). Thread-safe.

#include <set>

#include "absl/synchronization/mutex.h"
#include "grpcpp/client_context.h"

namespace switchyard::proxy {

class CallSet {
 public:
  // False (and the call is cancelled at once) once `CancelAll` has run.
  bool Add(grpc::ClientContext* context) ABSL_LOCKS_EXCLUDED(mutex_) {
    absl::MutexLock lock(&mutex_);
    if (cancelled_) context->TryCancel();
    calls_.insert(context);
    return !cancelled_;
  }
  void Remove(grpc::ClientContext* context) ABSL_LOCKS_EXCLUDED(mutex_) {
    absl::MutexLock lock(&mutex_);
    calls_.erase(context);
  }
  // Whether `CancelAll` has run: for work that is no call (a data-plane read) to ask.
  bool cancelled() ABSL_LOCKS_EXCLUDED(mutex_) {
    absl::MutexLock lock(&mutex_);
    return cancelled_;
  }
  void CancelAll() ABSL_LOCKS_EXCLUDED(mutex_) {
    absl::MutexLock lock(&mutex_);
    cancelled_ = true;
    for (grpc::ClientContext* context : calls_) context->TryCancel();
  }

 private:
  absl::Mutex mutex_;
  std::set<grpc::ClientContext*> calls_ ABSL_GUARDED_BY(mutex_);
  bool cancelled_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace switchyard::proxy
