#include "proxy/fleet.h"

#include <algorithm>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_server.h"
#include "common/grpc_status.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/thread_name.h"

namespace switchyard::proxy {
namespace {

constexpr absl::Duration kWatchBackoffMin = absl::Milliseconds(100);
constexpr absl::Duration kWatchBackoffMax = absl::Seconds(2);
constexpr absl::Duration kProbePeriod = absl::Milliseconds(250);

// Threads for every lane's completions: settling an answer is short, so a few carry
// thousands of hosts; more than one so a burst of answers spreads over cores.
size_t LanePoolThreads() {
  return std::clamp<size_t>(std::thread::hardware_concurrency() / 4, 2, 8);
}

}  // namespace

Fleet::Fleet(std::string rm_address, WorkerConnection::HostCallbackSink host_callbacks)
    : rm_address_(std::move(rm_address)),
      proxy_id_(absl::Uniform<uint64_t>(absl::BitGen(), 1, UINT64_MAX)),
      host_callbacks_(std::move(host_callbacks)),
      lane_pool_(std::make_shared<CompletionPool>(LanePoolThreads(), "sy-lanes")),
      rm_(ResourceManager::NewStub(CreateChannel(rm_address_))) {
  watcher_ = std::thread([this] {
    NameThisThread("sy-fleet-watch");
    WatchLoop();
  });
  housekeeper_ = std::thread([this] {
    NameThisThread("sy-housekeeper");
    HousekeepingLoop();
  });
  // Probes block for up to a second each: on a thread of their own.
  prober_ = std::thread([this] {
    NameThisThread("sy-prober");
    while (!stop_.WaitForNotificationWithTimeout(kProbePeriod)) {
      for (WorkerConnection* connection : Connections()) connection->ProbeIfDown();
    }
  });
}

Fleet::~Fleet() {
  stop_.Notify();
  {
    absl::MutexLock lock(&mutex_);
    if (watch_context_ != nullptr) watch_context_->TryCancel();
  }
  watcher_.join();
  housekeeper_.join();
  prober_.join();
  // Every connection stops before any goes away: their readers' last callbacks may
  // release buffers of other connections.
  for (WorkerConnection* connection : Connections()) connection->Close();
}

int32_t Fleet::NextLaunchId() {
  // Above the ids the RM gives, which another proxy's launches on the same hosts may have.
  return static_cast<int32_t>(launches_.fetch_add(1) % limits::kRmLaunchIdsMax +
                              limits::kRmLaunchIdsMax + 1);
}

void Fleet::WatchLoop() {
  absl::Duration backoff = kWatchBackoffMin;
  bool warned = false;
  while (!stop_.HasBeenNotified()) {
    auto context = std::make_shared<grpc::ClientContext>();
    {
      absl::MutexLock lock(&mutex_);
      if (stop_.HasBeenNotified()) return;
      watch_context_ = context;
    }
    WatchFleetRequest request;
    request.set_proxy(proxy_id_);
    request.set_changes_only(true);  // Apply adds and refreshes; it never drops
    auto reader = rm_->WatchFleet(context.get(), request);
    switchyard::Fleet fleet;
    bool got = false;
    while (reader->Read(&fleet)) {
      got = true;
      if (warned) SY_LOG(Info) << "resource manager at " << rm_address_ << " reachable again";
      warned = false;
      backoff = kWatchBackoffMin;
      Apply(fleet);
    }
    absl::Status status = FromGrpcStatus(reader->Finish());
    if (stop_.HasBeenNotified()) return;
    {
      absl::MutexLock lock(&mutex_);
      watch_error_ = absl::UnavailableError(absl::StrCat("cannot reach the resource manager at ",
                                                         rm_address_, ": ", status.message()));
    }
    if (!warned) {
      SY_LOG(Warning) << "fleet watch on the resource manager at " << rm_address_
                      << (got ? " ended" : " failed") << " (" << status
                      << "); keeping the last view and retrying";
      warned = true;
    }
    if (stop_.WaitForNotificationWithTimeout(backoff)) return;
    backoff = std::min(backoff * 2, kWatchBackoffMax);
  }
}

absl::StatusOr<GangNumbers> Fleet::NumberGang(uint64_t session, const std::vector<HostKey>& hosts) {
  {
    absl::MutexLock lock(&gang_mutex_);
    if (absl::Now() < gang_fallback_until_) {
      return absl::UnavailableError("the resource manager did not number the last gang");
    }
  }
  NumberGangRequest request;
  request.set_proxy(proxy_id_);
  request.set_session(session);
  for (const auto& [slice, host] : hosts) {
    HostRef* ref = request.add_hosts();
    ref->set_slice_index(slice);
    ref->set_host_index(host);
  }
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(limits::kGangNumberTimeoutMs));
  NumberGangResponse response;
  absl::Status status = FromGrpcStatus(rm_->NumberGang(&context, request, &response));
  if (status.ok() &&
      (response.sequencer() == 0 || response.numbers_size() != static_cast<int>(hosts.size()))) {
    status = absl::InternalError("the resource manager's gang numbers do not match the hosts");
  }
  absl::MutexLock lock(&gang_mutex_);
  if (!status.ok()) {
    // Until then this proxy orders its own multi-host launches, not others' with them.
    if (absl::Now() >= gang_fallback_until_) {
      SY_LOG(Warning) << "the resource manager at " << rm_address_
                      << " did not number a multi-host launch (" << status
                      << "): this proxy orders its own for the next "
                      << limits::kGangFallbackMs / 1000
                      << " s, not with other proxies' launches on the same hosts";
    }
    gang_fallback_until_ = absl::Now() + absl::Milliseconds(limits::kGangFallbackMs);
    return status;
  }
  return GangNumbers{response.sequencer(),
                     hosts,
                     {response.numbers().begin(), response.numbers().end()},
                     response.launch_id()};
}

void Fleet::VoidGangs(uint64_t session, const GangNumbers* gang) {
  VoidGangsRequest request;
  request.set_proxy(proxy_id_);
  request.set_session(session);
  request.set_session_ended(gang == nullptr);
  if (gang != nullptr) {
    for (size_t i = 0; i < gang->hosts.size() && i < gang->numbers.size(); ++i) {
      HostRef* ref = request.add_hosts();
      ref->set_slice_index(gang->hosts[i].first);
      ref->set_host_index(gang->hosts[i].second);
      request.add_numbers(gang->numbers[i]);
    }
  }
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  VoidGangsResponse response;
  absl::Status status = FromGrpcStatus(rm_->VoidGangs(&context, request, &response));
  if (!status.ok()) {
    // The RM voids them anyway once this proxy's watch ends; until then hosts may wait.
    SY_LOG(Warning) << "cannot tell the resource manager that gang numbers of session " << session
                    << " will not come (" << status << "): its hosts may wait for them";
  }
}

double Fleet::TenantShare(const std::string& tenant) const {
  absl::MutexLock lock(&shares_mutex_);
  auto it = shares_.find(tenant);
  return it == shares_.end() ? 1.0 : it->second;
}

void Fleet::Apply(const switchyard::Fleet& fleet) {
  {
    absl::MutexLock lock(&shares_mutex_);
    shares_ =
        std::map<std::string, double>(fleet.tenant_shares().begin(), fleet.tenant_shares().end());
  }
  std::vector<std::pair<WorkerConnection*, HostView>> updates;
  {
    absl::MutexLock lock(&mutex_);
    have_view_ = true;
    watch_error_ = absl::OkStatus();
    for (const SliceStatus& slice : fleet.slices()) {
      for (const HostStatus& host : slice.hosts()) {
        const HostKey key{host.slice_index(), host.host_index()};
        auto& connection = connections_[key];
        if (connection == nullptr) {
          connection = std::make_unique<WorkerConnection>(key.first, key.second, host_callbacks_,
                                                          lane_pool_);
        }
        // Device ids are stable per (slice, host, ordinal): entries are only added or
        // refreshed, never dropped while a session may hold them.
        for (const DeviceInfo& device : host.devices()) {
          devices_[device.global_id()] = DeviceEntry{device, host.plugin(), connection.get()};
        }
        updates.emplace_back(connection.get(),
                             HostView{host.address(), host.boot_id(), host.healthy(),
                                      host.rejoining(), host.protocol_version()});
      }
    }
  }
  for (auto& [connection, view] : updates) connection->Update(view);
}

std::vector<WorkerConnection*> Fleet::Connections() const {
  absl::MutexLock lock(&mutex_);
  std::vector<WorkerConnection*> out;
  for (const auto& [key, connection] : connections_) out.push_back(connection.get());
  return out;
}

void Fleet::HousekeepingLoop() {
  absl::Time next_stall_check = absl::Now();
  while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(limits::kDeleteFlushPeriodMs))) {
    const bool check_stalls = absl::Now() >= next_stall_check;
    if (check_stalls)
      next_stall_check = absl::Now() + absl::Milliseconds(limits::kStallCheckPeriodMs);
    for (WorkerConnection* connection : Connections()) {
      if (check_stalls) connection->CheckStall(absl::Milliseconds(limits::kWorkerStallMs));
      connection->SendDeletes();  // a flag's load unless deletions wait
    }
  }
}

absl::Status Fleet::WaitForView(absl::Duration timeout) {
  absl::MutexLock lock(&mutex_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return have_view_; };
  mutex_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  if (!have_view_) {
    return watch_error_.ok() ? absl::UnavailableError(absl::StrCat(
                                   "no answer from the resource manager at ", rm_address_,
                                   " within ", absl::FormatDuration(timeout)))
                             : watch_error_;
  }
  if (devices_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no worker is registered with the resource manager at ", rm_address_));
  }
  return absl::OkStatus();
}

std::vector<DeviceEntry> Fleet::Devices() const {
  absl::MutexLock lock(&mutex_);
  std::vector<DeviceEntry> out;
  for (const auto& [id, entry] : devices_) out.push_back(entry);
  return out;
}

}  // namespace switchyard::proxy
