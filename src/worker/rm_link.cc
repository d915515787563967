#include "worker/rm_link.h"

#include <algorithm>

#include "absl/strings/str_join.h"
#include "common/grpc_server.h"
#include "common/grpc_status.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/machine_memory.h"
#include "common/status_macros.h"
#include "common/thread_name.h"

namespace switchyard::worker {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(2);

bool Retryable(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) ||
         absl::IsCancelled(status) || absl::IsUnknown(status);
}

void SetDeadline(grpc::ClientContext* context) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + kCallTimeout));
}

}  // namespace

std::function<absl::StatusOr<std::vector<uint64_t>>(uint64_t, uint64_t, uint64_t)> GangVoidsAsker(
    const std::string& rm_address, int slice_index, int host_index) {
  std::shared_ptr<ResourceManager::Stub> stub = ResourceManager::NewStub(CreateChannel(rm_address));
  return [stub, slice_index, host_index](uint64_t sequencer, uint64_t first,
                                         uint64_t last) -> absl::StatusOr<std::vector<uint64_t>> {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    GangVoidsRequest request;
    request.set_slice_index(slice_index);
    request.set_host_index(host_index);
    request.set_sequencer(sequencer);
    request.set_first(first);
    request.set_last(last);
    GangVoidsResponse response;
    SY_RETURN_IF_ERROR(FromGrpcStatus(stub->GangVoids(&context, request, &response)));
    std::vector<uint64_t> voids;
    if (response.unknown_sequencer()) {
      for (uint64_t number = first; number <= last; ++number) voids.push_back(number);
    } else {
      voids.assign(response.voids().begin(), response.voids().end());
    }
    return voids;
  };
}

RmLink::RmLink(std::string rm_address, RegisterWorkerRequest request, DeviceMap* devices,
               absl::Duration register_timeout, std::function<void(absl::Status)> on_fatal,
               Reports reports)
    : rm_address_(std::move(rm_address)),
      request_(std::move(request)),
      devices_(devices),
      register_timeout_(register_timeout),
      on_fatal_(std::move(on_fatal)),
      reports_(std::move(reports)),
      stub_(ResourceManager::NewStub(CreateChannel(rm_address_))),
      heartbeat_period_(absl::Milliseconds(limits::kHeartbeatPeriodMs)) {}

RmLink::~RmLink() { Stop(); }

void RmLink::Start() {
  thread_ = std::thread([this] {
    NameThisThread("sy-rm-link");
    Run();
  });
}

void RmLink::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

absl::Status RmLink::RegisterWithBackoff() {
  const absl::Time started = absl::Now();
  absl::Duration backoff = absl::Milliseconds(100);
  // A restarted worker may find its place still held by its previous process, which
  // the RM has not yet declared dead: it waits that long before taking no for an answer.
  const absl::Duration held_patience =
      absl::Milliseconds(2 * limits::kHeartbeatPeriodMs * limits::kHeartbeatMissesMax);
  absl::Time held_since = absl::InfiniteFuture();
  for (int attempt = 1;; ++attempt) {
    grpc::ClientContext context;
    SetDeadline(&context);
    RegisterWorkerResponse response;
    absl::Status status = FromGrpcStatus(stub_->RegisterWorker(&context, request_, &response));
    if (status.ok()) {
      incarnation_ = response.incarnation();
      if (response.heartbeat_period_ms() > 0) {
        heartbeat_period_ = absl::Milliseconds(response.heartbeat_period_ms());
      }
      devices_->SetGlobalIds({response.devices().begin(), response.devices().end()});
      if (reports_.gang_start != nullptr && response.gang_sequencer() != 0) {
        reports_.gang_start(response.gang_sequencer(), response.gang_first());
      }
      std::vector<int64_t> ids;
      for (const DeviceInfo& device : response.devices()) ids.push_back(device.global_id());
      SY_LOG(Info) << "registered with the resource manager at " << rm_address_ << " as slice "
                   << request_.slice_index() << " host " << request_.host_index() << ": devices "
                   << absl::StrJoin(ids, ",");
      return absl::OkStatus();
    }
    if (absl::IsAlreadyExists(status)) {
      held_since = std::min(held_since, absl::Now());
      if (absl::Now() - held_since < held_patience) {
        SY_LOG(Warning) << status.message() << "; waiting for the RM to declare it dead";
        if (!Sleep(absl::Milliseconds(limits::kHeartbeatPeriodMs))) {
          return absl::CancelledError("stopping");
        }
        continue;
      }
    }
    if (!Retryable(status)) {
      return absl::Status(status.code(), absl::StrCat("the resource manager at ", rm_address_,
                                                      " refused this worker: ", status.message()));
    }
    if (register_timeout_ > absl::ZeroDuration() && absl::Now() - started > register_timeout_) {
      return absl::UnavailableError(absl::StrCat("gave up: the resource manager at ", rm_address_,
                                                 " was unreachable for ",
                                                 absl::FormatDuration(register_timeout_)));
    }
    SY_LOG(Warning) << "resource manager at " << rm_address_ << " not reachable (attempt "
                    << attempt << ": " << status.message() << "); retrying in "
                    << absl::FormatDuration(backoff);
    if (!Sleep(backoff)) return absl::CancelledError("stopping");
    backoff = std::min(backoff * 2, absl::Milliseconds(limits::kRegisterBackoffMaxMs));
  }
}

void RmLink::Run() {
  bool warned_unreachable = false;
  while (!stop_.HasBeenNotified()) {
    absl::Status registered = RegisterWithBackoff();
    if (absl::IsCancelled(registered) && stop_.HasBeenNotified()) return;
    if (!registered.ok()) {
      on_fatal_(registered);
      return;
    }
    // Heartbeat until the RM forgets us (then register again) or we stop.
    absl::Time previous = absl::Now();
    while (Sleep(heartbeat_period_)) {
      grpc::ClientContext context;
      SetDeadline(&context);
      HeartbeatRequest request;
      request.set_incarnation(incarnation_);
      request.set_resident_bytes(ResidentBytes());
      if (reports_.buffer_bytes != nullptr) request.set_buffer_bytes(reports_.buffer_bytes());
      if (reports_.gang_passed != nullptr) {
        auto [sequencer, passed] = reports_.gang_passed();
        request.set_gang_sequencer(sequencer);
        request.set_gang_passed(passed);
      }
      HeartbeatResponse response;
      const absl::Time sent = absl::Now();
      absl::Status status = FromGrpcStatus(stub_->Heartbeat(&context, request, &response));
      // Late heartbeats are what the RM's question to a silent host forgives; saying
      // which kind (this thread not running, or the call slow) tells an operator why.
      const absl::Duration took = absl::Now() - sent;
      if (sent - previous > 2 * heartbeat_period_ || took > heartbeat_period_) {
        SY_LOG(Warning) << "a heartbeat went " << absl::FormatDuration(sent - previous)
                        << " after the previous one and took " << absl::FormatDuration(took)
                        << " (every " << absl::FormatDuration(heartbeat_period_)
                        << " is the plan): this host is starved or its connection slow";
      }
      previous = sent;
      if (status.ok()) {
        if (warned_unreachable) SY_LOG(Info) << "resource manager reachable again";
        warned_unreachable = false;
        continue;
      }
      if (absl::IsNotFound(status)) {
        SY_LOG(Warning) << "the resource manager no longer knows this worker (" << status.message()
                        << "); registering again";
        break;
      }
      if (!warned_unreachable) {
        SY_LOG(Warning) << "heartbeat to " << rm_address_ << " failed: " << status.message()
                        << "; still trying";
        warned_unreachable = true;
      }
    }
  }
}

}  // namespace switchyard::worker
