#pragma once

// One accept on a listening socket, as every accept loop of ours wants it: interrupted
// and aborted handshakes retried, a pause (not a spin) while the process is out of
// descriptors or memory, and a stop that wakes it (the caller shuts the socket down).

#include <functional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace switchyard {

// The next connection's descriptor, opened with `flags` (SOCK_CLOEXEC, SOCK_NONBLOCK).
// CANCELLED once `stopping` says so; UNAVAILABLE for an error that will not pass (the
// loop should end). `where` names the socket in the log line of a pause.
absl::StatusOr<int> AcceptNext(int listen_fd, int flags, absl::string_view where,
                               const std::function<bool()>& stopping);

}  // namespace switchyard
