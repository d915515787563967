#include "rm/rm_service.h"

#include <unistd.h>

#include <algorithm>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_join.h"
#include "common/files.h"
#include "common/grpc_server.h"
#include "common/grpc_status.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/machine_memory.h"
#include "common/metrics.h"
#include "common/thread_name.h"
#include "common/wire_record.h"
#include "rm/dashboard.h"
#include "rm/fleet_changes.h"
#include "rm/host_probe.h"

namespace switchyard::rm {
namespace {

// How long the RM waits for a worker whose place another registration claims.
constexpr absl::Duration kHolderProbeTimeout = absl::Milliseconds(500);
// The dashboard shows the load of at most this many hosts, each answering within this.
constexpr size_t kDashboardHostsMax = 256;
constexpr absl::Duration kDashboardStatsTimeout = absl::Milliseconds(300);
constexpr absl::Duration kDashboardRefresh = absl::Milliseconds(900);

}  // namespace

RmService::RmService(const Clock* clock, absl::Duration heartbeat_period, MembershipOptions options,
                     LeaseOptions lease_options, std::string state_file)
    : clock_(clock),
      heartbeat_period_(heartbeat_period),
      state_file_(std::move(state_file)),
      membership_(options),
      leases_(std::move(lease_options)),
      gangs_(absl::Uniform<uint64_t>(absl::BitGen(), 1, UINT64_MAX),
             limits::kGangNumbersPerHostMax),
      proxies_(absl::Milliseconds(limits::kProxyReportForgetMs), limits::kProxiesReportedMax) {}

RmService::~RmService() { Stop(); }

absl::Status RmService::Start() {
  if (!state_file_.empty()) {
    absl::StatusOr<std::string> bytes = ReadWholeFile(state_file_);
    if (bytes.ok()) {
      RmState state;
      if (!state.ParseFromString(*bytes)) {
        return absl::InvalidArgumentError(
            absl::StrCat("the state file ", state_file_,
                         " is not an RM state; move it away to start afresh "
                         "(device ids will then be assigned anew)"));
      }
      {
        absl::MutexLock lock(&mutex_);
        absl::Status restored = membership_.Restore(state, clock_->Now());
        if (!restored.ok()) {
          return absl::InvalidArgumentError(absl::StrCat("the state file ", state_file_,
                                                         " is inconsistent: ", restored.message()));
        }
      }
      SY_LOG(Info) << "restored " << state.device_ids_size() << " device ids and "
                   << state.hosts_size() << " hosts from " << state_file_
                   << "; waiting for the hosts to register again";
      absl::MutexLock save_lock(&save_mutex_);
      saved_ = *std::move(bytes);
    } else if (!absl::IsNotFound(bytes.status())) {
      return bytes.status();
    }
  }
  sweeper_ = std::thread([this] {
    NameThisThread("sy-rm-sweep");
    SweepLoop();
  });
  return absl::OkStatus();
}

void RmService::Stop() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (sweeper_.joinable()) sweeper_.join();
}

void RmService::SaveState() {
  if (state_file_.empty()) return;
  absl::MutexLock save_lock(&save_mutex_);
  std::string bytes;
  {
    absl::MutexLock lock(&mutex_);
    bytes = membership_.Export().SerializeAsString();
  }
  if (bytes == saved_) return;
  RecordWireBytes("rm_state", bytes);
  absl::Status written = WriteFileAtomically(state_file_, bytes);
  if (!written.ok()) {
    SY_LOG(Error) << "cannot save the RM state (device ids would change if the RM restarted now): "
                  << written;
    return;
  }
  saved_ = std::move(bytes);
}

void RmService::ConfirmOverdue() {
  std::vector<HostStatus> overdue;
  {
    absl::MutexLock lock(&mutex_);
    overdue = membership_.Overdue(clock_->Now());
  }
  if (overdue.empty()) return;
  // Outside the lock, all at once, within a heartbeat period: the sweeper stays well
  // inside what the membership would take for the RM's own stall.
  const std::vector<HostAnswer> answers = AskHosts(overdue, heartbeat_period_);
  for (size_t i = 0; i < overdue.size(); ++i) {
    const HostStatus& host = overdue[i];
    if (answers[i] == HostAnswer::kNoAnswer) continue;  // the window decides
    {
      absl::MutexLock lock(&mutex_);
      if (answers[i] == HostAnswer::kItself) {
        // Counts as a heartbeat; NOT_FOUND if it was declared dead meanwhile.
        if (!membership_.Heartbeat(host.incarnation(), clock_->Now()).ok()) continue;
      } else {
        membership_.Evict(host.slice_index(), host.host_index(), host.incarnation(), clock_->Now());
      }
    }
    if (answers[i] == HostAnswer::kItself) {
      SY_LOG(Warning) << "worker " << host.address() << " (slice " << host.slice_index() << " host "
                      << host.host_index() << ") sent no heartbeat for "
                      << host.last_heartbeat_age_ms()
                      << " ms but answers as itself: kept (a starved or slow host)";
    } else {
      SY_LOG(Warning) << "worker " << host.address() << " (slice " << host.slice_index() << " host "
                      << host.host_index() << ") is unhealthy: no heartbeat for "
                      << host.last_heartbeat_age_ms()
                      << " ms, and its address no longer answers as it";
    }
  }
}

void RmService::SweepLoop() {
  while (!stop_.WaitForNotificationWithTimeout(heartbeat_period_ / 2)) {
    kv_.Expire(clock_->Now());  // gets past their deadline: within half a period of it
    ConfirmOverdue();
    std::vector<HostStatus> died;
    uint64_t before, after;
    {
      absl::MutexLock lock(&mutex_);
      before = membership_.version();
      died = membership_.Sweep(clock_->Now());
      after = membership_.version();
      PlaceLeases();
      // The holders' streams say why; what they free goes to the queue at once.
      if (!leases_.Sweep(membership_.Snapshot(clock_->Now()), clock_->Now()).empty()) {
        PlaceLeases();
      }
    }
    for (const HostStatus& host : died) {
      SY_LOG(Warning) << "worker " << host.address() << " (slice " << host.slice_index() << " host "
                      << host.host_index() << ") is unhealthy: no heartbeat for "
                      << host.last_heartbeat_age_ms() << " ms";
    }
    if (after != before) SaveState();  // forgotten hosts leave the file too
  }
}

absl::StatusOr<RegisterWorkerResponse> RmService::Register(const RegisterWorkerRequest& request,
                                                           std::optional<HostStatus>* holder) {
  absl::MutexLock lock(&mutex_);
  if (holder->has_value()) {  // found gone: its place is free
    membership_.Evict((*holder)->slice_index(), (*holder)->host_index(), (*holder)->incarnation(),
                      clock_->Now());
  }
  // Random, so that a stale heartbeat can never match a later registration.
  const uint64_t incarnation = absl::Uniform<uint64_t>(random_, 1, UINT64_MAX);
  absl::StatusOr<RegisterWorkerResponse> result =
      membership_.Register(request, incarnation, clock_->Now());
  *holder = absl::IsAlreadyExists(result.status())
                ? membership_.Holder(request.slice_index(), request.host_index(), clock_->Now())
                : std::nullopt;
  if (result.ok()) {
    // A new registration may be a new process: what it will be given starts here.
    result->set_gang_sequencer(gangs_.sequencer());
    result->set_gang_first(gangs_.Restarted({request.slice_index(), request.host_index()}));
  }
  return result;
}

bool RmService::HolderIsGone(const HostStatus& holder) {
  // Outside the lock: a probe waits for the network. One too slow to answer is busy (a
  // loaded host), not gone; if it went dark, its heartbeats stop and the newcomer, which
  // retries a held place for two heartbeat timeouts, gets it after the sweep.
  return AskHosts({holder}, kHolderProbeTimeout)[0] == HostAnswer::kGone;
}

grpc::Status RmService::RegisterWorker(grpc::ServerContext* context,
                                       const RegisterWorkerRequest* request,
                                       RegisterWorkerResponse* response) {
  RecordWire("rm_register", *request);
  std::optional<HostStatus> holder;
  absl::StatusOr<RegisterWorkerResponse> result = Register(*request, &holder);
  // A worker restarted on a new address finds its place held by its predecessor until
  // heartbeats time out; a predecessor that does not answer as itself is gone now.
  if (absl::IsAlreadyExists(result.status()) && holder.has_value() && HolderIsGone(*holder)) {
    SY_LOG(Warning) << "the worker holding slice " << holder->slice_index() << " host "
                    << holder->host_index() << " at " << holder->address()
                    << " does not answer as itself; " << request->address() << " replaces it";
    result = Register(*request, &holder);
  }
  if (!result.ok()) {
    SY_LOG(Warning) << "refused registration from " << request->address().substr(0, 256) << ": "
                    << result.status().message();
    return ToGrpcStatus(result.status());
  }
  SaveState();
  *response = *std::move(result);
  response->set_heartbeat_period_ms(absl::ToInt64Milliseconds(heartbeat_period_));
  std::vector<int64_t> ids;
  for (const DeviceInfo& device : response->devices()) ids.push_back(device.global_id());
  SY_LOG(Info) << "worker " << request->address() << " joined slice " << request->slice_index()
               << " host " << request->host_index() << " (" << request->plugin().platform_name()
               << ", PJRT " << request->plugin().pjrt_api_major() << "."
               << request->plugin().pjrt_api_minor() << "): devices " << absl::StrJoin(ids, ",");
  return grpc::Status::OK;
}

std::string RmService::RenderMetrics() {
  Fleet fleet;
  LeaseTable leases;
  size_t gang_numbers = 0;
  {
    absl::MutexLock lock(&mutex_);
    fleet = membership_.Snapshot(clock_->Now());
    leases = leases_.Snapshot(clock_->Now());
    gang_numbers = gangs_.kept();
  }
  int healthy = 0, unhealthy = 0, devices = 0, healthy_slices = 0;
  for (const SliceStatus& slice : fleet.slices()) {
    healthy_slices += slice.healthy();
    for (const HostStatus& host : slice.hosts()) {
      (host.healthy() ? healthy : unhealthy) += 1;
      if (host.healthy()) devices += host.devices_size();
    }
  }
  MetricsText text;
  text.Add("switchyard_rm_hosts", "gauge", "Registered hosts by health.", healthy,
           "state=\"healthy\"")
      .Add("switchyard_rm_gang_numbers", "gauge",
           "Gang numbers given that their hosts have not passed yet.", gang_numbers)
      .Add("switchyard_rm_hosts", "gauge", "Registered hosts by health.", unhealthy,
           "state=\"unhealthy\"")
      .Add("switchyard_rm_slices", "gauge", "Slices whose hosts are all healthy.", healthy_slices)
      .Add("switchyard_rm_devices", "gauge", "Devices on healthy hosts.", devices)
      .Add("switchyard_rm_kv_keys", "gauge", "Keys in the bootstrap key-value store.", kv_.size())
      .Add("switchyard_rm_kv_bytes", "gauge", "Bytes in the bootstrap key-value store.",
           kv_.bytes())
      .Add("switchyard_rm_kv_waiting_gets", "gauge",
           "Key-value gets waiting for their key (each holds no thread).", kv_.waiting())
      .Add("switchyard_rm_leases", "gauge", "Leases of the shared pool by state.",
           leases.held_size(), "state=\"held\"")
      .Add("switchyard_rm_leases", "gauge", "Leases of the shared pool by state.",
           leases.queued_size(), "state=\"queued\"");
  return text.str();
}

std::string RmService::RenderStatusJson() {
  absl::MutexLock status_lock(&status_mutex_);
  if (absl::Now() - status_at_ < kDashboardRefresh) return status_json_;
  Fleet fleet;
  LeaseTable leases;
  {
    absl::MutexLock lock(&mutex_);
    fleet = StatusFleetLocked();
    leases = leases_.Snapshot(clock_->Now());
  }
  // Every healthy host at once, each bounded: a host that hangs costs the page 300 ms.
  struct Call {
    std::string address;
    grpc::ClientContext context;
    WorkerStats stats;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<WorkerStats>> reader;
  };
  std::vector<std::unique_ptr<Call>> calls;
  grpc::CompletionQueue queue;
  {
    absl::MutexLock lock(&stubs_mutex_);
    for (const SliceStatus& slice : fleet.slices()) {
      for (const HostStatus& host : slice.hosts()) {
        if (!host.healthy() || calls.size() >= kDashboardHostsMax) continue;
        std::shared_ptr<Worker::Stub>& stub = stubs_[host.address()];
        if (stub == nullptr) stub = Worker::NewStub(CreateChannel(host.address()));
        auto call = std::make_unique<Call>();
        call->address = host.address();
        call->context.set_deadline(absl::ToChronoTime(absl::Now() + kDashboardStatsTimeout));
        call->reader = stub->AsyncGetStats(&call->context, GetStatsRequest(), &queue);
        call->reader->Finish(&call->stats, &call->status, call.get());
        calls.push_back(std::move(call));
      }
    }
    // Forgotten hosts' connections go.
    if (stubs_.size() > static_cast<size_t>(limits::kHostsMax)) stubs_.clear();
  }
  std::map<std::string, WorkerStats> stats;
  for (size_t i = 0; i < calls.size(); ++i) {
    void* tag = nullptr;
    bool ok = false;
    if (!queue.Next(&tag, &ok)) break;
    Call* call = static_cast<Call*>(tag);
    if (ok && call->status.ok()) stats[call->address] = call->stats;
  }
  queue.Shutdown();
  void* tag;
  bool ok;
  while (queue.Next(&tag, &ok)) {
  }
  status_json_ = StatusJson(fleet, leases, stats);
  status_at_ = absl::Now();
  return status_json_;
}

grpc::Status RmService::Heartbeat(grpc::ServerContext* context, const HeartbeatRequest* request,
                                  HeartbeatResponse* response) {
  RecordWire("rm_heartbeat", *request);
  absl::MutexLock lock(&mutex_);
  absl::Status status = membership_.Heartbeat(request->incarnation(), clock_->Now(), *request);
  if (status.ok() && request->gang_sequencer() == gangs_.sequencer()) {
    std::optional<std::pair<int, int>> host = membership_.HostOf(request->incarnation());
    if (host.has_value()) gangs_.Passed(*host, request->gang_passed());
  }
  return ToGrpcStatus(status);
}

Fleet RmService::FleetLocked() {
  Fleet fleet = membership_.Snapshot(clock_->Now());
  fleet.mutable_tenant_shares()->insert(leases_.tenant_shares().begin(),
                                        leases_.tenant_shares().end());
  return fleet;
}

Fleet RmService::StatusFleetLocked() {
  Fleet fleet = FleetLocked();
  for (ProxyStatus& proxy : proxies_.List(clock_->Now())) *fleet.add_proxies() = std::move(proxy);
  fleet.set_rm_pid(getpid());
  fleet.set_rm_resident_bytes(ResidentBytes());
  return fleet;
}

grpc::Status RmService::GetFleet(grpc::ServerContext* context, const GetFleetRequest* request,
                                 Fleet* response) {
  absl::MutexLock lock(&mutex_);
  *response = StatusFleetLocked();
  return grpc::Status::OK;
}

grpc::Status RmService::ReportProxy(grpc::ServerContext* context, const ReportProxyRequest* request,
                                    ReportProxyResponse* response) {
  RecordWire("rm_report_proxy", *request);
  absl::MutexLock lock(&mutex_);
  proxies_.Report(*request, clock_->Now());
  return grpc::Status::OK;
}

grpc::Status RmService::WatchFleet(grpc::ServerContext* context, const WatchFleetRequest* request,
                                   grpc::ServerWriter<Fleet>* writer) {
  {
    absl::MutexLock lock(&mutex_);
    if (watchers_ >= limits::kFleetWatchersMax) {
      return ToGrpcStatus(absl::ResourceExhaustedError(
          absl::StrCat(watchers_, " fleet watches are open, the limit")));
    }
    ++watchers_;
    if (request->proxy() != 0) ++watching_proxies_[request->proxy()];
  }
  absl::Cleanup unwatch = [this, proxy = request->proxy()] {
    absl::MutexLock lock(&mutex_);
    --watchers_;
    if (proxy != 0 && --watching_proxies_[proxy] == 0) {
      watching_proxies_.erase(proxy);
      gangs_.ProxyGone(proxy);
    }
  };
  uint64_t sent = 0;
  FleetChanges changes;
  while (true) {
    Fleet fleet;
    {
      absl::MutexLock lock(&mutex_);
      auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
        return stopping_ || membership_.version() != sent;
      };
      // Wakes now and then to notice a watcher that went away.
      mutex_.AwaitWithTimeout(absl::Condition(&changed), absl::Seconds(1));
      if (stopping_ || context->IsCancelled()) return grpc::Status::OK;
      if (membership_.version() == sent) continue;
      fleet = FleetLocked();
      sent = fleet.version();
    }
    // Outside the lock: comparing a large fleet's slices is the watcher's own cost.
    if (request->changes_only()) fleet = changes.Next(fleet);
    if (!writer->Write(fleet)) return grpc::Status::OK;
  }
}

grpc::Status RmService::NumberGang(grpc::ServerContext* context, const NumberGangRequest* request,
                                   NumberGangResponse* response) {
  RecordWire("rm_number_gang", *request);
  if (request->hosts_size() < 1 || request->hosts_size() > limits::kHostsMax) {
    return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
        "a gang spans 1 to ", limits::kHostsMax, " hosts, not ", request->hosts_size())));
  }
  std::vector<GangNumbers::HostKey> hosts;
  for (const HostRef& host : request->hosts())
    hosts.emplace_back(host.slice_index(), host.host_index());
  std::vector<GangNumbers::HostKey> sorted = hosts;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    return ToGrpcStatus(absl::InvalidArgumentError("a gang names a host twice"));
  }
  absl::MutexLock lock(&mutex_);
  if (!watching_proxies_.contains(request->proxy())) {
    return ToGrpcStatus(absl::FailedPreconditionError(absl::StrCat(
        "proxy ", request->proxy(), " has no fleet watch open on this resource manager")));
  }
  for (const auto& [slice, host] : hosts) {
    if (!membership_.Lists(slice, host)) {
      return ToGrpcStatus(absl::InvalidArgumentError(
          absl::StrCat("slice ", slice, " host ", host, " is not in the fleet")));
    }
  }
  response->set_sequencer(gangs_.sequencer());
  for (uint64_t number : gangs_.Number(request->proxy(), request->session(), hosts)) {
    response->add_numbers(number);
  }
  response->set_launch_id(gangs_.NextLaunchId());
  return grpc::Status::OK;
}

grpc::Status RmService::VoidGangs(grpc::ServerContext* context, const VoidGangsRequest* request,
                                  VoidGangsResponse* response) {
  RecordWire("rm_void_gangs", *request);
  if (request->hosts_size() != request->numbers_size() ||
      request->hosts_size() > limits::kHostsMax) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("a void names ", request->hosts_size(), " hosts and ", request->numbers_size(),
                     " numbers (one each, at most ", limits::kHostsMax, ")")));
  }
  absl::MutexLock lock(&mutex_);
  for (int i = 0; i < request->hosts_size(); ++i) {
    const HostRef& host = request->hosts(i);
    gangs_.Void({host.slice_index(), host.host_index()}, request->numbers(i), request->proxy(),
                request->session());
  }
  if (request->session_ended()) gangs_.SessionEnded(request->proxy(), request->session());
  return grpc::Status::OK;
}

grpc::Status RmService::GangVoids(grpc::ServerContext* context, const GangVoidsRequest* request,
                                  GangVoidsResponse* response) {
  RecordWire("rm_gang_voids", *request);
  if (request->first() > request->last() ||
      request->last() - request->first() >= static_cast<uint64_t>(limits::kGangVoidsQueryMax)) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("ask about 1 to ", limits::kGangVoidsQueryMax, " gang numbers, not ",
                     request->first(), "..", request->last())));
  }
  absl::MutexLock lock(&mutex_);
  if (request->sequencer() != gangs_.sequencer()) {
    response->set_unknown_sequencer(true);
    return grpc::Status::OK;
  }
  for (uint64_t number : gangs_.Voids({request->slice_index(), request->host_index()},
                                      request->first(), request->last())) {
    response->add_voids(number);
  }
  return grpc::Status::OK;
}

grpc::Status RmService::KeyValuePut(grpc::ServerContext* context, const KeyValuePutRequest* request,
                                    KeyValuePutResponse* response) {
  RecordWire("rm_kv_put", *request);
  return ToGrpcStatus(kv_.Put(request->key(), request->value(), request->allow_overwrite()));
}

namespace {

// One get on the key-value store: answered by the store (a put, the sweeper's expiry)
// or ended by its client; whichever comes first finishes the call.
class KvGetReactor final : public grpc::ServerUnaryReactor {
 public:
  KvGetReactor(KvStore* kv, KeyValueGetResponse* response) : kv_(kv), response_(response) {}

  void Start(const std::string& key, absl::Time now, absl::Time deadline) {
    // Set before the call can be cancelled: OnCancel comes after this returns.
    wait_ = kv_->Get(key, now, deadline, [this](absl::StatusOr<std::string> value) {
      if (value.ok()) response_->set_value(*std::move(value));
      Finish(ToGrpcStatus(value.status()));
    });
  }
  void OnCancel() override {
    if (kv_->Cancel(wait_)) Finish(grpc::Status(grpc::StatusCode::CANCELLED, "get cancelled"));
  }
  void OnDone() override { delete this; }

 private:
  KvStore* const kv_;
  KeyValueGetResponse* const response_;
  KvStore::WaitId wait_ = 0;
};

}  // namespace

grpc::ServerUnaryReactor* RmService::KeyValueGet(grpc::CallbackServerContext* context,
                                                 const KeyValueGetRequest* request,
                                                 KeyValueGetResponse* response) {
  RecordWire("rm_kv_get", *request);
  // Bounded by the client's own deadline too: a waiting get never outlives its call.
  const absl::Time now = clock_->Now();
  absl::Duration timeout = absl::Milliseconds(std::max<int64_t>(0, request->timeout_ms()));
  timeout = std::min({timeout, absl::FromChrono(context->deadline()) - absl::Now(),
                      absl::Milliseconds(limits::kKvGetWaitMaxMs)});
  auto* reactor = new KvGetReactor(&kv_, response);
  reactor->Start(request->key(), now, now + std::max(timeout, absl::ZeroDuration()));
  return reactor;
}

void RmService::PlaceLeases() {
  const absl::Time now = clock_->Now();
  for (uint64_t id : leases_.Place(membership_.Snapshot(now), now)) {
    SY_LOG(Info) << "lease " << id << " placed on slices "
                 << absl::StrJoin(leases_.Get(id)->slices, ",");
  }
}

grpc::Status RmService::Lease(grpc::ServerContext* context, const LeaseRequest* request,
                              grpc::ServerWriter<LeaseEvent>* writer) {
  RecordWire("rm_lease", *request);
  LeaseSpec spec;
  spec.owner = request->owner();
  spec.tenant = request->tenant();
  for (const LeaseShape& shape : request->slices()) {
    if (shape.devices() < 0) {
      return ToGrpcStatus(absl::InvalidArgumentError("a slice of a negative number of devices"));
    }
    spec.shapes.push_back(SliceShape{NormalizedKind(shape.kind()), shape.devices()});
  }
  spec.preferred.assign(request->preferred_slices().begin(), request->preferred_slices().end());
  spec.reclaim = request->reclaim();
  spec.replaces = request->replaces_lease_id();
  uint64_t id = 0;
  {
    absl::MutexLock lock(&mutex_);
    // Reclaims after an RM restart find the table full of new requests: they get room.
    if (static_cast<int64_t>(leases_.size()) >= limits::kLeasesMax * (spec.reclaim ? 2 : 1)) {
      return ToGrpcStatus(absl::ResourceExhaustedError(
          absl::StrCat(leases_.size(), " leases are open or queued, the limit")));
    }
    const absl::Time now = clock_->Now();
    absl::StatusOr<uint64_t> queued =
        leases_.Request(std::move(spec), membership_.Snapshot(now), now);
    if (!queued.ok()) return ToGrpcStatus(queued.status());
    id = *queued;
    SY_LOG(Info) << "lease " << id << " asked by " << request->owner().substr(0, 256) << " (tenant "
                 << request->tenant().substr(0, 256) << ") for " << request->slices_size()
                 << " slices";
    PlaceLeases();
  }
  // However the stream ends, the slices go back to the pool and the queue moves.
  absl::Cleanup release = [this, id] {
    absl::MutexLock lock(&mutex_);
    leases_.Release(id);
    PlaceLeases();
    SY_LOG(Info) << "lease " << id << " ended";
  };
  LeaseEvent sent;
  sent.set_queue_position(-1);  // nothing sent yet
  uint64_t seen = 0;            // the version of the leases last looked at
  while (true) {
    LeaseEvent event;
    {
      absl::MutexLock lock(&mutex_);
      auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
        return stopping_ || leases_.version() != seen;
      };
      // Wakes now and then to notice a holder that went away.
      const bool woken = mutex_.AwaitWithTimeout(absl::Condition(&changed), absl::Seconds(1));
      if (stopping_) {
        return ToGrpcStatus(absl::UnavailableError("the resource manager is stopping"));
      }
      if (context->IsCancelled()) return grpc::Status::OK;
      if (!woken) continue;  // nothing changed: only the holder's presence was checked
      seen = leases_.version();
      std::optional<Leases::State> state = leases_.Get(id);
      if (!state.has_value()) return grpc::Status::OK;
      if (!state->ended.ok()) {
        SY_LOG(Warning) << "lease " << id << " ended: " << state->ended.message();
        return ToGrpcStatus(state->ended);
      }
      event.set_lease_id(id);
      event.set_queue_position(state->queue_position);
      for (int slice : state->slices) event.add_slice_indices(slice);
    }
    if (event.SerializeAsString() == sent.SerializeAsString()) continue;
    if (!writer->Write(event)) return grpc::Status::OK;
    sent = std::move(event);
  }
}

grpc::Status RmService::GetLeases(grpc::ServerContext* context, const GetLeasesRequest* request,
                                  LeaseTable* response) {
  absl::MutexLock lock(&mutex_);
  *response = leases_.Snapshot(clock_->Now());
  return grpc::Status::OK;
}

}  // namespace switchyard::rm
