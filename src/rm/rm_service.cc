#include "rm/rm_service.h"

#include "absl/strings/str_join.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/metrics.h"

namespace switchyard::rm {

RmService::RmService(const Clock* clock, absl::Duration heartbeat_period,
                     int heartbeat_misses_max)
    : clock_(clock),
      heartbeat_period_(heartbeat_period),
      membership_(heartbeat_period * heartbeat_misses_max),
      sweeper_([this] { SweepLoop(); }) {}

RmService::~RmService() { Stop(); }

void RmService::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (sweeper_.joinable()) sweeper_.join();
}

void RmService::SweepLoop() {
  while (!stop_.WaitForNotificationWithTimeout(heartbeat_period_ / 2)) {
    std::vector<HostStatus> died;
    {
      absl::MutexLock lock(&mutex_);
      died = membership_.Sweep(clock_->Now());
    }
    for (const HostStatus& host : died) {
      SY_LOG(Warning) << "worker " << host.address() << " (slice " << host.slice_index()
                      << " host " << host.host_index() << ") is unhealthy: no heartbeat for "
                      << host.last_heartbeat_age_ms() << " ms";
    }
  }
}

grpc::Status RmService::RegisterWorker(grpc::ServerContext* context,
                                       const RegisterWorkerRequest* request,
                                       RegisterWorkerResponse* response) {
  absl::StatusOr<RegisterWorkerResponse> result;
  {
    absl::MutexLock lock(&mutex_);
    // Random, so that a stale heartbeat can never match a later registration.
    uint64_t incarnation = absl::Uniform<uint64_t>(random_, 1, UINT64_MAX);
    result = membership_.Register(*request, incarnation, clock_->Now());
  }
  if (!result.ok()) {
    SY_LOG(Warning) << "refused registration from " << request->address() << ": "
                    << result.status().message();
    return ToGrpcStatus(result.status());
  }
  *response = *std::move(result);
  response->set_heartbeat_period_ms(absl::ToInt64Milliseconds(heartbeat_period_));
  std::vector<int64_t> ids;
  for (const DeviceInfo& device : response->devices()) ids.push_back(device.global_id());
  SY_LOG(Info) << "worker " << request->address() << " joined slice " << request->slice_index()
               << " host " << request->host_index() << " (" << request->plugin().platform_name()
               << ", PJRT " << request->plugin().pjrt_api_major() << "."
               << request->plugin().pjrt_api_minor() << "): devices "
               << absl::StrJoin(ids, ",");
  return grpc::Status::OK;
}

std::string RmService::RenderMetrics() {
  Fleet fleet;
  {
    absl::MutexLock lock(&mutex_);
    fleet = membership_.Snapshot(clock_->Now());
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
  text.Add("switchyard_rm_hosts", "gauge", "Registered hosts by health.", healthy, "state=\"healthy\"")
      .Add("switchyard_rm_hosts", "gauge", "Registered hosts by health.", unhealthy,
           "state=\"unhealthy\"")
      .Add("switchyard_rm_slices", "gauge", "Slices whose hosts are all healthy.", healthy_slices)
      .Add("switchyard_rm_devices", "gauge", "Devices on healthy hosts.", devices)
      .Add("switchyard_rm_kv_keys", "gauge", "Keys in the bootstrap key-value store.", kv_.size());
  return text.str();
}

grpc::Status RmService::Heartbeat(grpc::ServerContext* context, const HeartbeatRequest* request,
                                  HeartbeatResponse* response) {
  absl::MutexLock lock(&mutex_);
  return ToGrpcStatus(membership_.Heartbeat(request->incarnation(), clock_->Now()));
}

grpc::Status RmService::GetFleet(grpc::ServerContext* context, const GetFleetRequest* request,
                                 Fleet* response) {
  absl::MutexLock lock(&mutex_);
  *response = membership_.Snapshot(clock_->Now());
  return grpc::Status::OK;
}

}  // namespace switchyard::rm

namespace switchyard::rm {

grpc::Status RmService::KeyValuePut(grpc::ServerContext* context, const KeyValuePutRequest* request,
                                    KeyValuePutResponse* response) {
  return ToGrpcStatus(kv_.Put(request->key(), request->value(), request->allow_overwrite()));
}

grpc::Status RmService::KeyValueGet(grpc::ServerContext* context, const KeyValueGetRequest* request,
                                    KeyValueGetResponse* response) {
  // Bounded by the client's own deadline too: a waiting get never outlives its call.
  absl::Duration timeout = absl::Milliseconds(std::max<int64_t>(0, request->timeout_ms()));
  const absl::Time deadline = absl::FromChrono(context->deadline());
  timeout = std::min(timeout, std::max(absl::ZeroDuration(), deadline - absl::Now()));
  auto value = kv_.Get(request->key(), timeout);
  if (!value.ok()) return ToGrpcStatus(value.status());
  response->set_value(*std::move(value));
  return grpc::Status::OK;
}

}  // namespace switchyard::rm
