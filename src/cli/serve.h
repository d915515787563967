#pragma once

// The tail every serving command shares: report a failed start, else serve until
// SIGINT/SIGTERM and shut down in order.

#include <memory>

#include "absl/status/statusor.h"
#include "common/logging.h"
#include "common/signals.h"

namespace switchyard::cli {

template <typename Server>
int ServeUntilSignal(absl::StatusOr<std::unique_ptr<Server>> server) {
  if (!server.ok()) {
    SY_LOG(Error) << "cannot start: " << server.status();
    return 1;
  }
  int signal = WaitForTerminationSignal();
  SY_LOG(Info) << "signal " << signal << ": shutting down";
  (*server)->Shutdown();
  SY_LOG(Info) << "stopped";
  return 0;
}

}  // namespace switchyard::cli
