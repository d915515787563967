#pragma once

// One session's lease on slices of the shared pool (ResourceManager.Lease). The lease
// is a stream to the RM that holds the slices while it stays open: destroying this
// object, or the proxy dying, gives them back. If the stream breaks (the RM restarted)
// the lease asks again for the same slices and keeps the session going meanwhile; if
// the RM places it elsewhere, or takes it back, or the proxy reclaims an idle session,
// the lease is lost for good: the slices go back at once, and `on_lost` runs a grace
// period later (the session ends then, freeing what it holds; a request in between is
// answered with the reason). Thread-safe.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/slice_shape.h"
#include "switchyard/rm.grpc.pb.h"

namespace switchyard::proxy {

class SliceLease {
 public:
  // Asks at once. `label` names the session in logs.
  SliceLease(const std::string& rm_address, std::string label, std::string tenant,
             std::vector<SliceShape> shapes, std::function<void()> on_lost);
  ~SliceLease();
  // Gives the slices back and stops; `on_lost` is not called after it returns.
  // Idempotent; the destructor calls it.
  void Close() ABSL_LOCKS_EXCLUDED(mutex_);
  SliceLease(const SliceLease&) = delete;
  SliceLease& operator=(const SliceLease&) = delete;

  // Waits until the slices are placed (one for each shape, in order), the RM refuses the
  // request (its status: FAILED_PRECONDITION for one the fleet cannot hold), or
  // `cancelled()` (CANCELLED). Logs the queue position as it changes and Pathways'
  // `unplaced -> placed` line once per slice.
  absl::StatusOr<std::vector<int>> WaitPlaced(const std::function<bool()>& cancelled)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // OK while the lease stands (also while the RM is away); UNAVAILABLE with the reason
  // once it is lost.
  absl::Status Held() const ABSL_LOCKS_EXCLUDED(mutex_);
  // Ends a placed lease for `reason` (UNAVAILABLE) as if the RM had taken it back.
  void Lose(const std::string& reason) ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  void Run();
  void RunLease();

  const std::string label_;
  const std::vector<SliceShape> shapes_;
  const std::function<void()> on_lost_;
  std::unique_ptr<ResourceManager::Stub> rm_;
  LeaseRequest request_;
  mutable absl::Mutex mutex_;
  std::vector<int> slices_ ABSL_GUARDED_BY(mutex_);  // empty until placed
  uint64_t lease_id_ ABSL_GUARDED_BY(mutex_) = 0;    // the RM's name for it
  int position_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::Status refused_ ABSL_GUARDED_BY(mutex_);  // before placement
  absl::Status lost_ ABSL_GUARDED_BY(mutex_);     // after placement
  std::shared_ptr<grpc::ClientContext> call_ ABSL_GUARDED_BY(mutex_);
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace switchyard::proxy
