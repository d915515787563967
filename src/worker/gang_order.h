#pragma once

// The order in which a worker starts the multi-host launches of each owner (a proxy's
// connection epoch), whichever of the owner's Dispatch streams carries each.
//
// A proxy numbers its multi-host launches per worker (ExecuteRequest.gang: 1, 2, ...)
// as it sends them, every part of one launch in one step, so two launches that share
// hosts are numbered in the same order on each of them. Each worker lets launch `g` go
// once `g - 1` has passed (handed to the plugin, or failed before it could): every host
// then starts them in one order, and none waits in a collective for a peer that started
// another launch first. Launches numbered 0 are not ordered here (a stream's own order
// suffices: a proxy that opens one stream per worker, or a single-host launch).
//
// Pure logic. Not thread-safe (the executor locks around it).

#include <cstdint>

#include "absl/container/flat_hash_map.h"

namespace switchyard::worker {

class GangOrder {
 public:
  // Whether `owner`'s launch numbered `gang` may go now.
  bool MayGo(uint64_t owner, uint64_t gang) const;
  // `owner`'s launch `gang` has passed: the next may go. Numbers only move forward (one
  // that gave up waiting passes too, so that the owner's later launches are not stuck).
  void Passed(uint64_t owner, uint64_t gang);
  // The number `owner`'s next launch must have (1 for an owner not seen).
  uint64_t Next(uint64_t owner) const;
  // `owner` is gone: its numbers are forgotten.
  void Forget(uint64_t owner) { passed_.erase(owner); }
  size_t owners() const { return passed_.size(); }

 private:
  absl::flat_hash_map<uint64_t, uint64_t> passed_;  // owner -> highest number passed
};

}  // namespace switchyard::worker
