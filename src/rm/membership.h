#pragma once

// The fleet as the resource manager sees it: which worker holds each
// (slice, host), the global device ids, and health from heartbeats. Pure logic,
// no I/O: time comes in as arguments. Not thread-safe; `RmService` serializes calls.

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "switchyard/rm.pb.h"

namespace switchyard::rm {

class Membership {
 public:
  // A host is unhealthy once `heartbeat_timeout` passes without a heartbeat.
  explicit Membership(absl::Duration heartbeat_timeout) : heartbeat_timeout_(heartbeat_timeout) {}

  // Admits a worker, assigning global device ids stable for (slice, host, ordinal).
  // `incarnation` must be unique; it names this registration in heartbeats.
  // INVALID_ARGUMENT: missing or inconsistent fields. ALREADY_EXISTS: a live worker
  // at another address holds the same (slice, host).
  absl::StatusOr<RegisterWorkerResponse> Register(const RegisterWorkerRequest& request,
                                                  uint64_t incarnation, absl::Time now);

  // NOT_FOUND if `incarnation` is unknown or was declared dead: the worker must
  // register again.
  absl::Status Heartbeat(uint64_t incarnation, absl::Time now);

  // Declares hosts dead whose heartbeats stopped; returns them, for logging.
  std::vector<HostStatus> Sweep(absl::Time now);

  Fleet Snapshot(absl::Time now) const;

 private:
  using HostKey = std::pair<int, int>;  // (slice_index, host_index)
  struct Host {
    RegisterWorkerRequest request;  // as registered, with global ids filled in
    uint64_t incarnation = 0;
    absl::Time last_heartbeat;
    bool alive = false;  // false once declared dead; only a registration revives it
    int64_t registrations = 0;
  };

  bool Healthy(const Host& host, absl::Time now) const;
  int64_t DeviceId(int slice, int host, int ordinal);

  absl::Duration heartbeat_timeout_;
  std::map<HostKey, Host> hosts_;
  std::map<std::tuple<int, int, int>, int64_t> device_ids_;
  int64_t next_device_id_ = 0;
};

}  // namespace switchyard::rm
