#pragma once

// Which session holds which slices, and who waits: the RM's placement. Pure logic, no
// I/O: the fleet and time come in as arguments. Not thread-safe; `RmService`
// serializes calls.
//
// Contracts:
// - A slice is held by at most one lease. A lease is placed whole (every shape it asks
//   for) or not at all, on slices that are healthy when placed. A slice that goes down
//   later stays with its lease: down is a state, and the session's elastic handling
//   decides.
// - Requests are placed in order, and a request that does not fit blocks those behind
//   it, so a large request is never starved by small ones. The order is arrival (FIFO),
//   unless tenants have priorities (higher first) or shares are configured (then the
//   earliest request of the tenant holding the fewest slices per share; a tenant without
//   a share has share 1, without a priority 0).
// - A reclaim (a session asking again for the slices it held, after its stream to the RM
//   broke) comes before everything else and takes exactly those slices, healthy or not,
//   if they are free or still held by the lease it replaces; otherwise it ends at once.
// - A request that does not fit takes the slices it needs from leases of lower
//   priority (the lowest, most recently placed first), and only if that makes it fit;
//   those leases end (`State::ended`, ABORTED, says by whom).
// - A request that the whole fleet could not hold, empty, is refused at once
//   (FAILED_PRECONDITION); one that the fleet can no longer hold (hosts forgotten) ends
//   with FAILED_PRECONDITION when it reaches the head of the queue. Neither waits forever
//   nor blocks the queue.
// - With `max_hold`, leases held that long are taken back (ABORTED) when, and only as far
//   as, that lets the head of the queue fit; their slices are free at once.
// - `version()` grows with every change a waiter must see.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/slice_shape.h"
#include "switchyard/rm.pb.h"

namespace switchyard::rm {

struct LeaseOptions {
  std::map<std::string, double> tenant_shares;     // tenant -> share (> 0)
  std::map<std::string, int> tenant_priorities;    // tenant -> priority (higher wins)
  absl::Duration max_hold = absl::ZeroDuration();  // zero: a lease is never taken back
};

// Parses `--tenant_shares=alice:1,bob:2`. INVALID_ARGUMENT names what is wrong.
absl::StatusOr<std::map<std::string, double>> ParseTenantShares(const std::string& text);
// Parses `--tenant_priorities=prod:10,dev:0` (integers). INVALID_ARGUMENT names what is wrong.
absl::StatusOr<std::map<std::string, int>> ParseTenantPriorities(const std::string& text);

struct LeaseSpec {
  std::string owner;
  std::string tenant;
  std::vector<SliceShape> shapes;
  std::vector<int> preferred;  // slices to take first when free
  // Exactly `preferred` (one a shape), ahead of the queue; `replaces` is this session's
  // lease from before the break, if the RM still has it (it ends).
  bool reclaim = false;
  uint64_t replaces = 0;
};

class Leases {
 public:
  explicit Leases(LeaseOptions options) : options_(std::move(options)) {}

  // Queues a request and returns its id. INVALID_ARGUMENT for no shapes or more than
  // the limit (or a reclaim without one slice a shape); FAILED_PRECONDITION when the
  // fleet has fewer matching slices than asked.
  absl::StatusOr<uint64_t> Request(LeaseSpec spec, const Fleet& fleet, absl::Time now);
  // Ends a lease, queued or placed (unknown ids are ignored); its slices are free.
  void Release(uint64_t id);
  // Places what the order allows onto free healthy slices; returns the ids placed.
  std::vector<uint64_t> Place(const Fleet& fleet, absl::Time now);
  // Takes back leases held past `max_hold` that keep the head of the queue from
  // fitting; returns their ids. Call after `Place`.
  std::vector<uint64_t> Sweep(const Fleet& fleet, absl::Time now);

  struct State {
    std::vector<int> slices;  // empty while queued
    int queue_position = 0;   // 1-based while queued
    // OK while the lease stands or waits; ABORTED once taken back, FAILED_PRECONDITION
    // once it can no longer be placed. The holder's stream ends with it.
    absl::Status ended;
  };
  // Nullopt for an unknown (released) id.
  std::optional<State> Get(uint64_t id) const;
  LeaseTable Snapshot(absl::Time now) const;
  uint64_t version() const { return version_; }
  size_t size() const { return leases_.size(); }
  const std::map<std::string, double>& tenant_shares() const { return options_.tenant_shares; }

 private:
  struct Lease {
    LeaseSpec spec;
    uint64_t arrival = 0;
    absl::Time since;  // queued, then placed
    std::vector<int> slices;
    absl::Status ended;
  };

  // Queued ids in the order they would be placed now.
  std::vector<uint64_t> Order() const;
  double Share(const std::string& tenant) const;
  int Priority(const std::string& tenant) const;
  // Free healthy slices for every shape of `spec` (counting those held by `also_free`
  // as free), or nullopt.
  std::optional<std::vector<int>> Fit(const LeaseSpec& spec, const Fleet& fleet,
                                      const std::set<uint64_t>& also_free = {}) const;
  // Of the placed leases `candidate` accepts, those whose slices would let `id` fit
  // (nullopt: none would), in order (lowest priority, latest placed first), only those
  // it would take slices from.
  std::optional<std::set<uint64_t>> Victims(
      uint64_t id, const Fleet& fleet, const std::function<bool(const Lease&)>& candidate) const;
  // Whether the fleet, empty, could hold `spec` (each shape its own matching slice).
  static bool CouldHold(const LeaseSpec& spec, const Fleet& fleet);
  // Ends a lease with `status`; its slices are free.
  void End(uint64_t id, absl::Status status);
  bool Waiting(const Lease& lease) const { return lease.slices.empty() && lease.ended.ok(); }

  LeaseOptions options_;
  std::map<uint64_t, Lease> leases_;
  std::map<int, uint64_t> holders_;  // slice -> lease
  uint64_t next_id_ = 1;
  uint64_t version_ = 1;
};

}  // namespace switchyard::rm
