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
//   it, so a large request is never starved by small ones. The order is arrival (FIFO)
//   unless tenants have priorities or shares: higher priorities first, then the earliest
//   request of the tenant holding the fewest slices per share (a tenant without a share
//   has share 1, without a priority 0).
// - A request that does not fit takes the slices it needs from leases of lower
//   priority (the lowest, most recently placed first), and only if that makes it fit;
//   those leases are taken back (`State::revoked` says by whom).
// - A request that the whole fleet could not hold, empty, is refused at once
//   (FAILED_PRECONDITION): it would wait forever and block the queue.
// - With `max_hold`, a lease held that long while another request waits is taken back
//   (its holder learns why through `State::revoked`); its slices are free at once.
// - `version()` grows with every change a waiter must see.

#include <cstdint>
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
};

class Leases {
 public:
  explicit Leases(LeaseOptions options) : options_(std::move(options)) {}

  // Queues a request and returns its id. INVALID_ARGUMENT for no shapes or more than
  // the limit; FAILED_PRECONDITION when the fleet has fewer matching slices than asked.
  absl::StatusOr<uint64_t> Request(LeaseSpec spec, const Fleet& fleet, absl::Time now);
  // Ends a lease, queued or placed (unknown ids are ignored); its slices are free.
  void Release(uint64_t id);
  // Places what the order allows onto free healthy slices; returns the ids placed.
  std::vector<uint64_t> Place(const Fleet& fleet, absl::Time now);
  // Takes back leases held past `max_hold` while others wait; returns their ids.
  std::vector<uint64_t> Sweep(absl::Time now);

  struct State {
    std::vector<int> slices;  // empty while queued
    int queue_position = 0;   // 1-based while queued
    std::string revoked;      // why the lease was taken back; empty while it stands
  };
  // Nullopt for an unknown (released) id.
  std::optional<State> Get(uint64_t id) const;
  LeaseTable Snapshot(absl::Time now) const;
  uint64_t version() const { return version_; }
  size_t size() const { return leases_.size(); }

 private:
  struct Lease {
    LeaseSpec spec;
    uint64_t arrival = 0;
    absl::Time since;  // queued, then placed
    std::vector<int> slices;
    std::string revoked;
  };

  // Queued ids in the order they would be placed now.
  std::vector<uint64_t> Order() const;
  double Share(const std::string& tenant) const;
  int Priority(const std::string& tenant) const;
  // Free healthy slices for every shape of `spec` (counting those held by `also_free`
  // as free), or nullopt.
  std::optional<std::vector<int>> Fit(const LeaseSpec& spec, const Fleet& fleet,
                                      const std::set<uint64_t>& also_free = {}) const;
  // Leases of lower priority than `id` whose slices would let it fit (nullopt: none
  // would), the fewest in preemption order.
  std::optional<std::set<uint64_t>> Victims(uint64_t id, const Fleet& fleet) const;

  LeaseOptions options_;
  std::map<uint64_t, Lease> leases_;
  std::map<int, uint64_t> holders_;  // slice -> lease
  uint64_t next_id_ = 1;
  uint64_t version_ = 1;
};

}  // namespace switchyard::rm
