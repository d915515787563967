#pragma once

// Which launch goes to the devices next, so that tenants waiting to launch on this
// worker get device time in proportion to their shares (start-time fair queuing).
//
// Each flow (a tenant, or a session without one) has a finish tag in virtual time.
// A launch that asks to go gets the start tag max(virtual time, its flow's finish
// tag), and moves the finish tag on by its estimated device time over the flow's
// share; launches go in start-tag order (ties: first come), and the virtual time is
// the highest start tag of the launches that went. A flow that was idle starts at most
// kLag behind the virtual time: it keeps what it missed while its next launch was on
// the way (a client or proxy short of CPU for a moment), not what it left unused for
// longer. When a launch finishes,
// its flow is charged what it really took in place of the estimate. The estimate of
// a program is a moving average of its launches (the latest weighs a quarter).
//
// Only launches that wait are reordered: the order matters when the devices are busy
// and several flows have launches ready, which is when shares matter. Launches that
// must not be reordered (`in_order`) go first come, first served, among themselves
// and ahead of the others (NextInOrder); they are charged all the same.
//
// Pure logic: time is passed in. Not thread-safe (the executor locks around it).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace switchyard::worker {

class FairShare {
 public:
  // In virtual seconds (device seconds per unit of share): a flow of share 2 coming
  // back may go ahead of the others for up to 100 ms of its own device time.
  static constexpr double kLag = 0.05;
  static constexpr absl::Duration kRecent = absl::Milliseconds(50);
  // Shares outside this range would make tags infinite or lose their precision.
  static constexpr double kShareMin = 1e-3;
  static constexpr double kShareMax = 1e6;
  // Where device time of accounts past kTenantsAccountedMax goes (no tenant's name).
  static constexpr char kOtherAccount[] = "(other)";

  struct Request {
    std::string flow;          // who is charged: tenant, or a session's own key
    std::string account;       // where the device time is reported (a tenant, or "")
    double share = 1;          // > 0; others are taken as 1
    uint64_t program = 0;      // what it runs: launches of one program cost alike
    std::vector<int> devices;  // the device ordinals it occupies
    // Not to be overtaken: a multi-host launch's part (every host must run them in the
    // order they came, or their collectives wait on each other), or a launch that may
    // wait on the client (host callbacks).
    bool in_order = false;
  };

  // Registers a launch that wants to go; returns its id (never 0).
  uint64_t Arrive(Request request);
  // The waiting launch, not in order, that goes next (lowest start tag, then first
  // come); 0: none.
  uint64_t Next() const;
  // The first come of the waiting in-order launches; 0: none.
  uint64_t NextInOrder() const;
  // Launch `id` (waiting) goes to the devices at `now`.
  void Start(uint64_t id, absl::Time now);
  // Launch `id` (started) finished at `now`. Its devices were its own from the latest
  // of its start, the last finish on any of them (they run launches in order) and
  // `inputs_ready` (when its last input was computed, if later: a launch waiting for a
  // transfer holds no device meanwhile): that time, times the number of devices, is
  // what its flow is charged, and what this returns (0 for an unknown id).
  double Finish(uint64_t id, absl::Time now, absl::Time inputs_ready = absl::InfinitePast());
  // Launch `id` (waiting or started) will not run or not be measured: it is dropped,
  // and its flow is given back its estimate.
  void Withdraw(uint64_t id);
  // Forgets what `program`'s launches cost (it was deleted); launches of it that
  // finish later are charged but not measured.
  void Forget(uint64_t program) { cost_.erase(program); }

  size_t waiting() const { return waiting_; }
  // Flows with launches waiting or started: more than one means they compete.
  size_t active_flows() const { return active_flows_; }
  // Those, and flows whose last launch finished within kRecent before `now`: a flow
  // between two launches (its client issuing the next) still competes.
  size_t Competing(absl::Time now) const;
  // The estimated time the launches started and not finished keep their devices busy
  // (each launch's estimate over its number of devices).
  double queued() const { return queued_; }
  // Device seconds of finished launches, by account (past kTenantsAccountedMax
  // accounts, new ones are added up under kOtherAccount).
  const std::map<std::string, double>& served() const { return served_; }
  // Seconds each device ordinal was busy with finished launches.
  const std::map<int, double>& busy() const { return busy_; }
  // The estimated device seconds of a launch of `program` (0 until one finished).
  double Estimate(uint64_t program) const;

 private:
  struct Flow {
    double finish = 0;  // virtual seconds
    int launches = 0;   // waiting or started
  };
  struct Launch {
    Request request;
    double start = 0;    // its start tag
    double charged = 0;  // virtual seconds its flow was moved on by
    uint64_t order = 0;  // arrival
    bool started = false;
    absl::Time started_at;
    double queued = 0;  // its part of `queued_` once started
  };
  void Release(uint64_t id);  // drops a launch, and its flow once it has none
  // Finds Next and NextInOrder once per change: every launch waiting at the gate asks
  // each time the gate's lock is let go, and a scan each is quadratic in the waiters.
  void FindNext() const;

  uint64_t next_id_ = 1;
  double virtual_time_ = 0;
  size_t waiting_ = 0;
  size_t active_flows_ = 0;
  double queued_ = 0;
  absl::flat_hash_map<uint64_t, Launch> launches_;
  absl::flat_hash_map<std::string, Flow> flows_;
  absl::flat_hash_map<uint64_t, double> cost_;        // program -> mean device seconds
  absl::flat_hash_map<int, absl::Time> last_finish_;  // device ordinal -> time
  std::map<std::string, double> served_;
  std::map<int, double> busy_;
  absl::flat_hash_map<std::string, absl::Time> finished_at_;  // flow -> its last finish
  mutable bool found_ = true;  // `next_` and `next_in_order_` are current
  mutable uint64_t next_ = 0;
  mutable uint64_t next_in_order_ = 0;
};

}  // namespace switchyard::worker
