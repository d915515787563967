#pragma once

// The RM's dashboard: one static page (no external assets) that polls
// `/api/status` every second and draws the fleet, slices, health, per-host load, the
// pool's leases and its queue. `StatusJson` renders what the page polls.

#include <map>
#include <string>

#include "switchyard/rm.pb.h"
#include "switchyard/worker.pb.h"

namespace switchyard::rm {

// The page at `/`.
const std::string& DashboardHtml();

// {"fleet": Fleet, "leases": LeaseTable, "stats": {address: WorkerStats}} in proto JSON
// (field names as in the .proto). Hosts missing from `stats` did not answer.
std::string StatusJson(const Fleet& fleet, const LeaseTable& leases,
                       const std::map<std::string, WorkerStats>& stats);

}  // namespace switchyard::rm
