#pragma once

// The order in which a worker starts the multi-host launches of each owner, whichever
// Dispatch stream carries each. An owner is a numbering: a proxy's connection epoch
// (the proxy numbers its own launches) or the resource manager's sequencer (the RM
// numbers every proxy's launches: rm/gang_numbers.h).
//
// The numbering gives each multi-host launch one number per host (ExecuteRequest.gang:
// 1, 2, ...), every part of one launch in one step, so two launches that share hosts are
// numbered in the same order on each of them. Each worker lets launch `g` go once every
// number before it has passed (its launch handed to the plugin or failed, or the number
// declared void): every host then starts them in one order, and none waits in a
// collective for a peer that started another launch first. Launches numbered 0 are not
// ordered here (a stream's own order suffices: a single-host launch, or a proxy that
// opens one stream per worker).
//
// A number that passed without its launch (void, or skipped by one that gave up waiting)
// is late if its launch arrives after all: it must not start out of order.
//
// Pure logic. Not thread-safe (the executor locks around it).

#include <cstdint>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"

namespace switchyard::worker {

class GangOrder {
 public:
  // Whether `owner`'s launch numbered `gang` may go now: every number before it passed.
  bool MayGo(uint64_t owner, uint64_t gang) const;
  // Whether `gang`'s turn went by without it (it passed already): the launch must not go.
  bool Late(uint64_t owner, uint64_t gang) const;
  // `gang` passed (its launch went or failed, or it is void). In any order: the order
  // moves on once every number before it passed too.
  void Passed(uint64_t owner, uint64_t gang);
  // Every number up to `gang` passes: one gave up waiting for those before it, so that
  // the owner's later launches are not stuck.
  void PassThrough(uint64_t owner, uint64_t gang);
  // The number `owner`'s next launch must have (1 for an owner not seen).
  uint64_t Next(uint64_t owner) const;
  // `owner` is gone: its numbers are forgotten.
  void Forget(uint64_t owner) { owners_.erase(owner); }
  size_t owners() const { return owners_.size(); }

 private:
  struct Owner {
    uint64_t passed = 0;              // every number up to this one passed
    absl::btree_set<uint64_t> ahead;  // passed, above `passed + 1`
  };
  absl::flat_hash_map<uint64_t, Owner> owners_;
};

}  // namespace switchyard::worker
