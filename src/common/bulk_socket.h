#pragma once

// Blocking stream-socket I/O for the bulk data plane, every wait bounded: a peer that
// sends or takes nothing for `idle` is DEADLINE_EXCEEDED, one that hangs up early is
// DATA_LOSS. Writes never raise SIGPIPE.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace switchyard::bulk {

// Makes `fd` blocking with send and receive timeouts of `idle`.
absl::Status SetBlocking(int fd, absl::Duration idle);

absl::Status ReadAll(int fd, absl::Span<char> out);
absl::Status WriteAll(int fd, absl::string_view bytes);

// A connected socket to "unix:<path>" or "host:port" ("[v6]:port"), set up as
// SetBlocking does; UNAVAILABLE when nobody answers there (within `idle`, at most
// limits::kBulkIdleS).
absl::StatusOr<int> Connect(const std::string& address, absl::Duration idle);

}  // namespace switchyard::bulk
