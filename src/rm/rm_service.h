#pragma once

// gRPC adapter for rm.proto over `Membership`, plus the health sweeper thread and the
// state file that lets a restarted RM keep every device id.

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/random/random.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "rm/gang_numbers.h"
#include "rm/kv_store.h"
#include "rm/leases.h"
#include "rm/membership.h"
#include "rm/proxy_reports.h"
#include "switchyard/rm.grpc.pb.h"
#include "switchyard/worker.grpc.pb.h"

namespace switchyard::rm {

// KeyValueGet is served by callback: a get waiting for its key holds no thread.
class RmService final : public ::switchyard::ResourceManager::WithCallbackMethod_KeyValueGet<
                            ::switchyard::ResourceManager::Service> {
 public:
  // `state_file` empty: nothing persists across restarts.
  RmService(const Clock* clock, absl::Duration heartbeat_period, MembershipOptions options,
            LeaseOptions lease_options, std::string state_file);
  ~RmService() override;

  // Loads the state file, if there is one, and starts the sweeper. INVALID_ARGUMENT
  // for a state file that cannot be parsed (refusing to start beats renumbering).
  absl::Status Start();

  grpc::Status RegisterWorker(grpc::ServerContext* context, const RegisterWorkerRequest* request,
                              RegisterWorkerResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const HeartbeatRequest* request,
                         HeartbeatResponse* response) override;
  grpc::Status GetFleet(grpc::ServerContext* context, const GetFleetRequest* request,
                        Fleet* response) override;
  grpc::Status WatchFleet(grpc::ServerContext* context, const WatchFleetRequest* request,
                          grpc::ServerWriter<Fleet>* writer) override;
  grpc::Status KeyValuePut(grpc::ServerContext* context, const KeyValuePutRequest* request,
                           KeyValuePutResponse* response) override;
  grpc::ServerUnaryReactor* KeyValueGet(grpc::CallbackServerContext* context,
                                        const KeyValueGetRequest* request,
                                        KeyValueGetResponse* response) override;
  grpc::Status Lease(grpc::ServerContext* context, const LeaseRequest* request,
                     grpc::ServerWriter<LeaseEvent>* writer) override;
  grpc::Status GetLeases(grpc::ServerContext* context, const GetLeasesRequest* request,
                         LeaseTable* response) override;
  grpc::Status NumberGang(grpc::ServerContext* context, const NumberGangRequest* request,
                          NumberGangResponse* response) override;
  grpc::Status VoidGangs(grpc::ServerContext* context, const VoidGangsRequest* request,
                         VoidGangsResponse* response) override;
  grpc::Status GangVoids(grpc::ServerContext* context, const GangVoidsRequest* request,
                         GangVoidsResponse* response) override;
  grpc::Status ReportProxy(grpc::ServerContext* context, const ReportProxyRequest* request,
                           ReportProxyResponse* response) override;

  // Ends the watches and joins the sweeper thread. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mutex_);
  // The Prometheus text exposition of the fleet's state.
  std::string RenderMetrics() ABSL_LOCKS_EXCLUDED(mutex_);
  // What the dashboard polls (rm/dashboard.h): the fleet, the leases, and the stats of
  // the healthy hosts that answer within a short deadline.
  std::string RenderStatusJson() ABSL_LOCKS_EXCLUDED(mutex_, stubs_mutex_, status_mutex_);

 private:
  void SweepLoop();
  // Asks the hosts past their heartbeat timeout whether they are alive: one that answers
  // as itself counts as heartbeating, one whose address is gone is declared dead now.
  void ConfirmOverdue() ABSL_LOCKS_EXCLUDED(mutex_);
  // The fleet as proxies see it: membership, and the tenants' shares.
  Fleet FleetLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The fleet for people (GetFleet, the dashboard): with the proxies and the RM itself.
  Fleet StatusFleetLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Places what the queue allows (after any change to leases or the fleet) and logs it.
  void PlaceLeases() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Registers under the lock, evicting `*holder` first if set; on ALREADY_EXISTS sets
  // `*holder` to the live registration in the way.
  absl::StatusOr<RegisterWorkerResponse> Register(const RegisterWorkerRequest& request,
                                                  std::optional<HostStatus>* holder)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Whether the registered holder of a place is gone: its address refuses connections,
  // or answers with another boot id. Blocks up to half a second.
  static bool HolderIsGone(const HostStatus& holder);
  // Writes the state if it changed since the last write. Not under `mutex_`: a slow
  // disk delays only the registration that changed the state.
  void SaveState() ABSL_LOCKS_EXCLUDED(save_mutex_, mutex_);

  const Clock* clock_;
  const absl::Duration heartbeat_period_;
  const std::string state_file_;
  absl::Mutex mutex_;
  Membership membership_ ABSL_GUARDED_BY(mutex_);
  Leases leases_ ABSL_GUARDED_BY(mutex_);
  absl::BitGen random_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  int64_t watchers_ ABSL_GUARDED_BY(mutex_) = 0;
  // Proxies with a fleet watch open (WatchFleetRequest.proxy) -> how many: their gang
  // numbers are void once the count falls to 0.
  std::map<uint64_t, int> watching_proxies_ ABSL_GUARDED_BY(mutex_);
  GangNumbers gangs_ ABSL_GUARDED_BY(mutex_);
  ProxyReports proxies_ ABSL_GUARDED_BY(mutex_);
  absl::Mutex save_mutex_ ABSL_ACQUIRED_BEFORE(mutex_);
  std::string saved_ ABSL_GUARDED_BY(save_mutex_);  // what the file holds
  KvStore kv_;
  absl::Mutex stubs_mutex_;  // the dashboard's connections to workers, by address
  std::map<std::string, std::shared_ptr<Worker::Stub>> stubs_ ABSL_GUARDED_BY(stubs_mutex_);
  // The last status rendered, served again within a second: however many pages poll,
  // workers get at most one GetStats a second from the dashboard.
  absl::Mutex status_mutex_ ABSL_ACQUIRED_BEFORE(stubs_mutex_);
  std::string status_json_ ABSL_GUARDED_BY(status_mutex_);
  absl::Time status_at_ ABSL_GUARDED_BY(status_mutex_) = absl::InfinitePast();
  absl::Notification stop_;
  std::thread sweeper_;
};

}  // namespace switchyard::rm
