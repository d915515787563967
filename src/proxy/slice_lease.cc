#include "proxy/slice_lease.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/grpc_server.h"
#include "common/grpc_status.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/thread_name.h"

namespace switchyard::proxy {
namespace {

// After the stream to the RM breaks, how long before asking again.
constexpr absl::Duration kRetryAfter = absl::Milliseconds(500);
// How often a waiting session checks whether its client is still there.
constexpr absl::Duration kCancelCheckPeriod = absl::Milliseconds(200);

}  // namespace

SliceLease::SliceLease(const std::string& rm_address, std::string label, std::string tenant,
                       std::vector<SliceShape> shapes, std::function<void()> on_lost)
    : label_(std::move(label)),
      shapes_(std::move(shapes)),
      on_lost_(std::move(on_lost)),
      rm_(ResourceManager::NewStub(CreateChannel(rm_address))) {
  request_.set_owner(absl::StrCat("proxy session ", label_));
  request_.set_tenant(std::move(tenant));
  for (const SliceShape& shape : shapes_) {
    LeaseShape* wire = request_.add_slices();
    wire->set_kind(shape.kind);
    wire->set_devices(shape.devices);
  }
  thread_ = std::thread([this] {
    NameThisThread("sy-lease");
    Run();
  });
}

SliceLease::~SliceLease() { Close(); }

void SliceLease::Close() {
  {
    absl::MutexLock lock(&mutex_);
    if (!stop_.HasBeenNotified()) stop_.Notify();
    if (call_ != nullptr) call_->TryCancel();
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void SliceLease::Lose(const std::string& reason) {
  absl::MutexLock lock(&mutex_);
  if (slices_.empty() || !lost_.ok() || stop_.HasBeenNotified()) return;
  lost_ = absl::UnavailableError(reason);
  SY_LOG(Warning) << "session " << label_ << ": " << reason;
  if (call_ != nullptr) call_->TryCancel();
}

void SliceLease::Run() {
  RunLease();
  bool lost;
  {
    absl::MutexLock lock(&mutex_);
    lost = !lost_.ok();
  }
  // The session may still answer a request with the reason; then it ends, and what it
  // holds on the workers is freed for the slices' next holder.
  if (lost &&
      !stop_.WaitForNotificationWithTimeout(absl::Milliseconds(limits::kLostLeaseGraceMs))) {
    on_lost_();
  }
}

void SliceLease::RunLease() {
  bool warned = false;
  while (!stop_.HasBeenNotified()) {
    auto call = std::make_shared<grpc::ClientContext>();
    LeaseRequest request = request_;
    {
      absl::MutexLock lock(&mutex_);
      if (stop_.HasBeenNotified() || !lost_.ok()) return;
      call_ = call;
      if (!slices_.empty()) {
        // Asking again after the stream broke: exactly the slices the session holds.
        request.set_reclaim(true);
        request.set_replaces_lease_id(lease_id_);
        for (int slice : slices_) request.add_preferred_slices(slice);
      }
    }
    auto reader = rm_->Lease(call.get(), request);
    LeaseEvent event;
    while (reader->Read(&event)) {
      warned = false;
      absl::MutexLock lock(&mutex_);
      if (!lost_.ok()) {  // Lose() came between streams: give these back too
        call->TryCancel();
        continue;
      }
      lease_id_ = event.lease_id();
      if (event.slice_indices().empty()) {
        if (event.queue_position() != position_) {
          SY_LOG(Info) << "session " << label_ << ": waiting for " << shapes_.size()
                       << " slices in the pool's queue, position " << event.queue_position();
        }
        position_ = event.queue_position();
        continue;
      }
      std::vector<int> slices(event.slice_indices().begin(), event.slice_indices().end());
      if (slices.size() != shapes_.size() || (!slices_.empty() && slices != slices_)) {
        lost_ = absl::UnavailableError(absl::StrCat(
            "the resource manager placed the session on slices ", absl::StrJoin(slices, ","),
            " for ", shapes_.size(), " asked, holding ", absl::StrJoin(slices_, ",")));
        SY_LOG(Warning) << "session " << label_ << ": " << lost_.message();
        call->TryCancel();
        continue;
      }
      if (slices_.empty()) {
        slices_ = slices;
        position_ = 0;
        for (size_t i = 0; i < slices.size(); ++i) {
          // Pathways' words: tools wait for this line.
          SY_LOG(Info) << "session " << label_ << ": virtual slice " << i << " ("
                       << SliceShapeString(shapes_[i]) << ") unplaced -> placed on slice "
                       << slices[i];
        }
      }
    }
    const absl::Status status = FromGrpcStatus(reader->Finish());
    {
      absl::MutexLock lock(&mutex_);
      if (stop_.HasBeenNotified() || !lost_.ok()) return;
      if (absl::IsAborted(status)) {  // taken back: preempted, held too long, lost in a break
        lost_ = absl::UnavailableError(
            absl::StrCat("the pool took this session's slices back: ", status.message()));
        SY_LOG(Warning) << "session " << label_ << ": " << lost_.message();
        return;
      }
      if (slices_.empty() && !status.ok() && !absl::IsUnavailable(status) &&
          !absl::IsDeadlineExceeded(status) && !absl::IsCancelled(status)) {
        refused_ = status;  // the RM will not place it: asking again would not help
        return;
      }
    }
    if (!warned) {
      SY_LOG(Warning) << "session " << label_ << ": the lease stream to the resource manager "
                      << "ended (" << status << "); asking again";
      warned = true;
    }
    stop_.WaitForNotificationWithTimeout(kRetryAfter);
  }
}

absl::StatusOr<std::vector<int>> SliceLease::WaitPlaced(const std::function<bool()>& cancelled) {
  absl::MutexLock lock(&mutex_);
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return !slices_.empty() || !refused_.ok() || !lost_.ok();
  };
  while (!mutex_.AwaitWithTimeout(absl::Condition(&settled), kCancelCheckPeriod)) {
    if (cancelled()) {
      return absl::CancelledError("the client went away while waiting for its slices");
    }
  }
  if (!refused_.ok()) return refused_;
  if (!lost_.ok()) return lost_;
  return slices_;
}

absl::Status SliceLease::Held() const {
  absl::MutexLock lock(&mutex_);
  return lost_;
}

}  // namespace switchyard::proxy
