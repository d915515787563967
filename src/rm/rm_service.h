#pragma once

// gRPC adapter for rm.proto over `Membership`, plus the health sweeper thread.

#include <atomic>
#include <thread>

#include "absl/random/random.h"
#include "absl/synchronization/notification.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "rm/kv_store.h"
#include "rm/membership.h"
#include "switchyard/rm.grpc.pb.h"

namespace switchyard::rm {

class RmService final : public ::switchyard::ResourceManager::Service {
 public:
  RmService(const Clock* clock, absl::Duration heartbeat_period, int heartbeat_misses_max);
  ~RmService() override;

  grpc::Status RegisterWorker(grpc::ServerContext* context, const RegisterWorkerRequest* request,
                              RegisterWorkerResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const HeartbeatRequest* request,
                         HeartbeatResponse* response) override;
  grpc::Status GetFleet(grpc::ServerContext* context, const GetFleetRequest* request,
                        Fleet* response) override;
  grpc::Status KeyValuePut(grpc::ServerContext* context, const KeyValuePutRequest* request,
                           KeyValuePutResponse* response) override;
  grpc::Status KeyValueGet(grpc::ServerContext* context, const KeyValueGetRequest* request,
                           KeyValueGetResponse* response) override;

  // Joins the sweeper thread. Idempotent.
  void Stop();
  // The Prometheus text exposition of the fleet's state.
  std::string RenderMetrics() ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  void SweepLoop();

  const Clock* clock_;
  const absl::Duration heartbeat_period_;
  absl::Mutex mutex_;
  Membership membership_ ABSL_GUARDED_BY(mutex_);
  absl::BitGen random_ ABSL_GUARDED_BY(mutex_);
  KvStore kv_;
  absl::Notification stop_;
  std::thread sweeper_;
};

}  // namespace switchyard::rm
