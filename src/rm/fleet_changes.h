#pragma once

// What a fleet watcher that takes changes only (WatchFleetRequest.changes_only: proxies)
// is sent: the whole fleet first, then only the slices that differ from what it was last
// sent, so a change costs the watcher one slice, not the fleet (docs/scale.md). Ages and
// memory figures change without a new fleet version: they alone make no change. Pure
// logic; one per watcher.

#include <map>

#include "switchyard/rm.pb.h"

namespace switchyard::rm {

class FleetChanges {
 public:
  // The message for `now`: version and tenant shares always, and the slices this
  // watcher has not seen as they are now.
  Fleet Next(const Fleet& now);

 private:
  std::map<int, SliceStatus> sent_;  // without the figures that change on their own
};

}  // namespace switchyard::rm
