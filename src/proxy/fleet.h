#pragma once

// The proxy's view of the fleet: every device by global id, the host (slice, host)
// that owns it, and one `WorkerConnection` per host. Kept current by a watch on the
// resource manager (`WatchFleet`): a host that dies, restarts or returns is seen as
// it happens. While the RM is away the last view stands, and the watch reconnects.
// Thread-safe. The proxy never includes worker internals: only worker.proto.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/completion_pool.h"
#include "proxy/worker_connection.h"
#include "switchyard/rm.grpc.pb.h"

namespace switchyard::proxy {

using HostKey = std::pair<int, int>;  // (slice_index, host_index)

// The resource manager's numbers for one multi-host launch (rm/gang_numbers.h).
struct GangNumbers {
  uint64_t sequencer = 0;
  std::vector<HostKey> hosts;     // as asked
  std::vector<uint64_t> numbers;  // one per host
  int32_t launch_id = 0;
};

struct DeviceEntry {
  DeviceInfo info;  // global id, slice, host, local ordinal, kind, memories
  PluginInfo plugin;
  WorkerConnection* worker = nullptr;  // its host's; lives as long as the fleet
};

class Fleet {
 public:
  // `host_callbacks` goes to every worker connection.
  explicit Fleet(std::string rm_address,
                 WorkerConnection::HostCallbackSink host_callbacks = nullptr);
  ~Fleet();

  // Waits up to `timeout` for the first view from the RM. UNAVAILABLE if the RM has
  // not answered; FAILED_PRECONDITION if no worker has ever registered.
  absl::Status WaitForView(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mutex_);
  // Every device the RM lists or listed, up or down: down is a state, not an absence.
  std::vector<DeviceEntry> Devices() const ABSL_LOCKS_EXCLUDED(mutex_);
  // A fresh id for a launch spanning workers that the RM did not number: its parts on
  // every worker carry it, and no two such launches in this proxy share one (2^30 and
  // up: the RM's ids are below).
  int32_t NextLaunchId();
  const std::string& rm_address() const { return rm_address_; }
  // Names this proxy to the RM (random per process).
  uint64_t proxy_id() const { return proxy_id_; }
  // Numbers a launch of `session` spanning `hosts` in the RM's gang order, which every
  // proxy's multi-host launches share. UNAVAILABLE or FAILED_PRECONDITION when the RM
  // cannot (unreachable, an older RM, no watch open): the caller numbers it itself. After
  // such an answer the RM is not asked again for kGangFallbackMs. Blocks up to
  // kGangNumberTimeoutMs.
  absl::StatusOr<GangNumbers> NumberGang(uint64_t session, const std::vector<HostKey>& hosts)
      ABSL_LOCKS_EXCLUDED(gang_mutex_);
  // `gang`'s numbers will never reach its hosts (its launch was not sent), or, with
  // `gang` null, `session` ended: its numbers no host has passed are void, so that hosts
  // do not wait for them. Blocks up to a second.
  void VoidGangs(uint64_t session, const GangNumbers* gang);
  // `tenant`'s share of device time where sessions share slices (the RM's
  // --tenant_shares; 1 for a tenant it does not name).
  double TenantShare(const std::string& tenant) const ABSL_LOCKS_EXCLUDED(shares_mutex_);

 private:
  void WatchLoop();
  void Apply(const switchyard::Fleet& fleet) ABSL_LOCKS_EXCLUDED(mutex_);
  // Sends the deletions no operation carried along (kDeleteFlushPeriodMs) and ends the
  // epoch of a worker that stopped reading its stream.
  void HousekeepingLoop();
  std::vector<WorkerConnection*> Connections() const ABSL_LOCKS_EXCLUDED(mutex_);

  const std::string rm_address_;
  const uint64_t proxy_id_;  // random: names this proxy's gang numbers on the RM
  const WorkerConnection::HostCallbackSink host_callbacks_;
  // Drives every connection's lanes: the proxy's threads do not grow with the hosts.
  const std::shared_ptr<CompletionPool> lane_pool_;
  absl::Mutex gang_mutex_;
  absl::Time gang_fallback_until_ ABSL_GUARDED_BY(gang_mutex_) = absl::InfinitePast();
  std::unique_ptr<ResourceManager::Stub> rm_;
  mutable absl::Mutex mutex_;
  bool have_view_ ABSL_GUARDED_BY(mutex_) = false;
  absl::Status watch_error_ ABSL_GUARDED_BY(mutex_);
  std::map<int64_t, DeviceEntry> devices_ ABSL_GUARDED_BY(mutex_);
  std::map<HostKey, std::unique_ptr<WorkerConnection>> connections_ ABSL_GUARDED_BY(mutex_);
  std::atomic<uint32_t> launches_{0};
  // Apart from `mutex_`: read on every launch.
  mutable absl::Mutex shares_mutex_;
  std::map<std::string, double> shares_ ABSL_GUARDED_BY(shares_mutex_);
  absl::Notification stop_;
  std::shared_ptr<grpc::ClientContext> watch_context_ ABSL_GUARDED_BY(mutex_);
  std::thread watcher_;
  std::thread housekeeper_;
  std::thread prober_;  // probes hosts that are down (WorkerConnection::ProbeIfDown)
};

}  // namespace switchyard::proxy
