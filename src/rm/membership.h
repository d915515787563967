#pragma once

// The fleet as the resource manager sees it: which worker holds each
// (slice, host), the global device ids, and health from heartbeats. Pure logic,
// no I/O: time comes in as arguments. Not thread-safe; `RmService` serializes calls.
//
// Contracts:
// - A device id, once given to (slice, host, ordinal), is never given to anything else,
//   also across RM restarts when the state is restored (`Export`/`Restore`).
// - Down is a state, not an absence: a host that stops heartbeating stays listed
//   (unhealthy, same ids) until it re-registers, or until `forget_after` has passed.
// - `version()` grows with every change a watcher must see; equal versions mean equal
//   fleets (up to heartbeat ages).
// - A registration of a (slice, host) by a process with another boot id than its holder's
//   counts as a restart of that host (`HostStatus.restarts`), whether or not the holder was
//   seen down: supervisors restart workers faster than heartbeats time out.
// - Every number of a registration is checked against the limits in common/limits.h.
// - With `stall_after` set, time in which the RM made no call at all is forgiven: a host
//   declared dead has missed heartbeats that the RM was running to receive.
// - With `confirm_window` set, silence alone is not death: a host past its heartbeat
//   timeout is `Overdue` and stays healthy for the window, in which the caller asks it
//   directly and reports the answer (`Heartbeat` if it answered as itself, `Evict` if not).
//   A host that neither heartbeats nor is confirmed is declared dead when the window ends.
// - With an expected fleet (`expected`, Pathways' --instance_count/--instance_type), a
//   worker outside it is refused with FAILED_PRECONDITION, which it does not retry.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "switchyard/rm.pb.h"

namespace switchyard::rm {

// The fleet an operator declares (Pathways' `--instance_count=N --instance_type=GEN:AxB`):
// N slices of A*B devices, of a kind whose name contains GEN (compared lower-case, letters
// and digits only: `cpu` matches "cpu", `nvidia-h200` matches "NVIDIA H200").
struct ExpectedFleet {
  int slices = 0;             // 0: any number
  std::string kind;           // empty: any kind
  int devices_per_slice = 0;  // 0: any number
};

// Parses `--instance_type` ("cpu:4", "tpuv5e:4x8", "nvidia-h200:8"; empty: any) into
// `fleet->kind` and `fleet->devices_per_slice`. INVALID_ARGUMENT names what is wrong.
absl::Status ParseInstanceType(const std::string& instance_type, ExpectedFleet* fleet);

struct MembershipOptions {
  // A host is unhealthy once this passes without a heartbeat.
  absl::Duration heartbeat_timeout = absl::Seconds(2);
  // A host that has been down this long is no longer listed (its ids stay reserved).
  absl::Duration forget_after = absl::Hours(1);
  // After a restore, how long hosts have to re-register before they count as down.
  absl::Duration rejoin_grace = absl::Seconds(10);
  // The RM looks at the fleet at least this often (its sweeps). A longer gap between two
  // calls means the RM itself was not running (a paused VM, a starved process, a clock
  // jump): the gap is not counted against the hosts, which could not reach it meanwhile.
  // Zero: every gap counts.
  absl::Duration stall_after = absl::ZeroDuration();
  // How long past `heartbeat_timeout` a silent host stays healthy while the RM asks it
  // whether it is alive: a heartbeat delayed on its way (a starved thread, a slow
  // connection) must not end a user's job. Zero: silence is death.
  absl::Duration confirm_window = absl::ZeroDuration();
  ExpectedFleet expected;
};

class Membership {
 public:
  explicit Membership(MembershipOptions options) : options_(options) {}
  explicit Membership(absl::Duration heartbeat_timeout)
      : Membership(MembershipOptions{.heartbeat_timeout = heartbeat_timeout}) {}

  // Admits a worker, assigning global device ids stable for (slice, host, ordinal).
  // `incarnation` must be unique; it names this registration in heartbeats.
  // INVALID_ARGUMENT: missing, inconsistent or out-of-range fields. ALREADY_EXISTS: a
  // live worker at another address holds the same (slice, host). RESOURCE_EXHAUSTED:
  // the fleet is at its host or device id limit.
  absl::StatusOr<RegisterWorkerResponse> Register(const RegisterWorkerRequest& request,
                                                  uint64_t incarnation, absl::Time now);

  // NOT_FOUND if `incarnation` is unknown or was declared dead: the worker must
  // register again. The memory it reports shows in its HostStatus, without a new
  // version.
  absl::Status Heartbeat(uint64_t incarnation, absl::Time now,
                         const HeartbeatRequest& report = HeartbeatRequest());

  // The live registration holding (slice, host), if any: what a refused registration
  // competes with.
  std::optional<HostStatus> Holder(int slice_index, int host_index, absl::Time now);
  // Declares the holder of (slice, host) dead if it is still `incarnation` (the caller
  // found it gone: its address does not answer, or answers as another process).
  void Evict(int slice_index, int host_index, uint64_t incarnation, absl::Time now);

  // Live hosts past their heartbeat timeout but within `confirm_window`: the ones to ask.
  std::vector<HostStatus> Overdue(absl::Time now);

  // Declares hosts dead whose heartbeats stopped (returned, for logging), ends the
  // rejoin grace of restored hosts, and forgets hosts down for `forget_after`.
  std::vector<HostStatus> Sweep(absl::Time now);

  Fleet Snapshot(absl::Time now);
  uint64_t version() const { return version_; }
  // The (slice, host) registered as `incarnation`, if it still is.
  std::optional<std::pair<int, int>> HostOf(uint64_t incarnation) const;
  // Whether (slice, host) is listed, up or down.
  bool Lists(int slice_index, int host_index) const {
    return hosts_.contains({slice_index, host_index});
  }

  // What must survive an RM restart: the ids handed out and the hosts known.
  RmState Export() const;
  // Loads an exported state into an empty membership; its hosts are `rejoining` until
  // they register again or `rejoin_grace` passes. INVALID_ARGUMENT for a state that
  // contradicts itself (one id for two devices).
  absl::Status Restore(const RmState& state, absl::Time now);

 private:
  using HostKey = std::pair<int, int>;  // (slice_index, host_index)
  struct Host {
    RegisterWorkerRequest request;  // as registered, with global ids filled in
    uint64_t incarnation = 0;
    absl::Time last_heartbeat;
    bool alive = false;      // false once declared dead; only a registration revives it
    bool rejoining = false;  // restored from a state file, not registered since
    absl::Time down_since;
    int64_t registrations = 0;
    int64_t restarts = 0;  // registrations by a new process (boot id)
    absl::Time last_restart = absl::InfinitePast();
    int64_t resident_bytes = 0;  // as of its latest heartbeat
    int64_t buffer_bytes = 0;
  };

  // Every call starts here: forgives a gap in which the RM was not running.
  void Observe(absl::Time now);
  bool Healthy(const Host& host, absl::Time now) const;
  absl::Status CheckRequest(const RegisterWorkerRequest& request) const;
  absl::Status CheckExpected(const RegisterWorkerRequest& request) const;
  HostStatus Status(const HostKey& key, const Host& host, absl::Time now) const;

  MembershipOptions options_;
  std::map<HostKey, Host> hosts_;
  // Each host's current registration (not 0), for heartbeats to find their host.
  absl::flat_hash_map<uint64_t, HostKey> by_incarnation_;
  std::map<std::tuple<int, int, int>, int64_t> device_ids_;
  int64_t next_device_id_ = 0;
  uint64_t version_ = 1;
  absl::Time observed_ = absl::InfinitePast();  // the latest `now` seen
};

}  // namespace switchyard::rm
