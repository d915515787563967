#pragma once

// The gang order of programs spanning hosts, across every proxy: the resource manager
// numbers each multi-host launch on each of its hosts, all in one step, so any two
// launches that share hosts are numbered in the same order on each of them. A worker
// starts its numbered launches in number order (worker/gang_order.h), so no host waits
// in a collective for a peer that started another launch first: the Pathways paper's
// centralized gang scheduler, reduced to an order.
//
// Contracts:
// - `Number` gives each host its next number (1, 2, ...), in one step for all of a
//   launch's hosts. Numbers are per host and per sequencer (this object's random id, new
//   with every RM process: numbers are not kept across restarts).
// - A number whose launch will never reach its host is void: its proxy's watch ended
//   (`ProxyGone`) or its session did (`SessionEnded`) before the host passed it, its
//   proxy said so (`Void`), or the RM forgot it (past `max_per_host` numbers a host has
//   not passed, or given to the host's previous process: `Restarted`). A host that waits
//   asks `Voids` and passes them; a launch that arrives under a void number is refused.
// - A host reports the highest number up to which it passed them all (`Passed`): those
//   are forgotten. Memory is bounded by `max_per_host` numbers per host.
// Pure logic; not thread-safe (RmService serializes calls).

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/types/span.h"

namespace switchyard::rm {

class GangNumbers {
 public:
  using HostKey = std::pair<int, int>;  // (slice_index, host_index)

  GangNumbers(uint64_t sequencer, size_t max_per_host)
      : sequencer_(sequencer), max_per_host_(max_per_host) {}

  uint64_t sequencer() const { return sequencer_; }
  // One number for each of `hosts` (distinct), for `proxy`'s `session`; and a launch id
  // (1 .. limits::kRmLaunchIdsMax, repeating after that many launches).
  std::vector<uint64_t> Number(uint64_t proxy, uint64_t session, absl::Span<const HostKey> hosts);
  int32_t NextLaunchId();
  // Every number given to `proxy` (or to its `session`) that its host has not passed is
  // void from now on.
  void ProxyGone(uint64_t proxy);
  void SessionEnded(uint64_t proxy, uint64_t session);
  // `number` on `host` is void if it is `proxy`'s `session`'s (a launch numbered and
  // then not sent); false if it is not theirs (or forgotten).
  bool Void(const HostKey& host, uint64_t number, uint64_t proxy, uint64_t session);
  // A new process holds `host`: every number given so far is void to it (forgotten).
  // Returns the first number it will be given.
  uint64_t Restarted(const HostKey& host);
  // `host` passed every number up to `passed`.
  void Passed(const HostKey& host, uint64_t passed);
  // Of `first`..`last` on `host` (at most kGangVoidsQueryMax of them from `first`), the
  // void numbers, in order. Numbers not given yet are not void.
  std::vector<uint64_t> Voids(const HostKey& host, uint64_t first, uint64_t last) const;
  // Numbers kept, over all hosts (for tests and metrics).
  size_t kept() const;

 private:
  struct Given {
    uint64_t proxy = 0;
    uint64_t session = 0;
    bool void_ = false;
  };
  struct Host {
    uint64_t next = 1;
    uint64_t forgotten = 0;           // every number up to this one is forgotten
    std::map<uint64_t, Given> given;  // number -> whose (numbers above `forgotten`)
  };
  void Forget(Host& host, uint64_t upto);

  const uint64_t sequencer_;
  const size_t max_per_host_;
  std::map<HostKey, Host> hosts_;
  uint32_t launches_ = 0;
};

}  // namespace switchyard::rm
