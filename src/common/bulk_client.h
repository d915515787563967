#pragma once

// The pulling end of the bulk data plane (see bulk_server.h): the bytes of an offered
// buffer, read over one or several connections at once straight into their final
// memory.

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/bulk_wire.h"
#include "common/limits.h"

namespace switchyard::bulk {

// Reads the whole offer into `out` (its size is the buffer's), split into `streams`
// ranges read at once. UNAVAILABLE when the server cannot be reached at all, ABORTED
// when it closed (or went quiet) before answering: nothing was read, and the caller may
// fetch another way. DATA_LOSS when a transfer broke after its answer; the server's own
// code and sentence when it refused (an expired ticket: PERMISSION_DENIED; too many
// transfers at once: RESOURCE_EXHAUSTED). CANCELLED once `cancelled` (if set) says so,
// which it is asked after each limits::kBulkChunkBytes of a stream: a reader that has
// gone stops the transfer, and what it had landed is not to be used.
using Cancelled = std::function<bool()>;
absl::Status Pull(const std::string& address, const Ticket& ticket, absl::Span<char> out,
                  int streams, const Cancelled& cancelled = nullptr);

// As Pull on one stream, in order, telling `arrived` (if set) how many bytes from the
// start of `out` are in place each time another limits::kBulkChunkBytes (or the last)
// landed: a reader can pass the first bytes on while the rest still come. `idle`: how
// long the server may send nothing before the pull breaks (longer for a source still
// filling, such as an upload).
using Arrived = std::function<void(uint64_t)>;
absl::Status PullInOrder(const std::string& address, const Ticket& ticket, absl::Span<char> out,
                         const Arrived& arrived,
                         absl::Duration idle = absl::Seconds(limits::kBulkIdleS),
                         const Cancelled& cancelled = nullptr);

// What a failed pull leaves its reader. kElsewhere and kUnreachable: nothing was read,
// and the bytes may be fetched another way; kUnreachable also says the server cannot be
// reached from here at all (another host's Unix socket, a firewall), so later reads
// should not try it. kBroken: the transfer failed; report it.
enum class PullFailure { kBroken, kElsewhere, kUnreachable };
PullFailure ClassifyFailure(const absl::Status& status);

// How many streams a buffer of `bytes` is worth: one per limits::kBulkStreamBytes, at
// most limits::kBulkStreamsMax.
int StreamsFor(int64_t bytes);

}  // namespace switchyard::bulk
