#pragma once

// Asks registered workers directly whether they are alive (Worker.GetInfo): what the RM
// does before it takes silence, or a newcomer's claim to a place, as proof of death.

#include <vector>

#include "absl/time/time.h"
#include "switchyard/rm.pb.h"

namespace switchyard::rm {

enum class HostAnswer {
  kItself,    // answered with the boot id it registered with (or registered none)
  kGone,      // its address refuses connections, or answers as another process
  kNoAnswer,  // too slow: busy or dark, not proof either way
};

// Asks every host at once, each within `timeout`; blocks at most about that long.
// Answers in the order of `hosts`.
std::vector<HostAnswer> AskHosts(const std::vector<HostStatus>& hosts, absl::Duration timeout);

}  // namespace switchyard::rm
