#pragma once

// Every limit and period in one table, units last; each says why.

#include <cstdint>

namespace switchyard::limits {

// gRPC's 4 MiB default would cap programs and executables; arrays travel in chunks.
inline constexpr int kGrpcMessageBytesMax = 1 << 30;
// Chunk size for buffer streams: large enough to amortise per-message cost, small
// enough that no side holds much more than one chunk in flight.
inline constexpr int64_t kBufferChunkBytes = 4 << 20;
// Workers heartbeat this often; the RM declares a host unhealthy after
// kHeartbeatMissesMax periods without one (2 s: a lost host shows within 5 s).
inline constexpr int64_t kHeartbeatPeriodMs = 500;
inline constexpr int64_t kHeartbeatMissesMax = 4;
// A worker that cannot reach the RM retries with exponential backoff up to this.
inline constexpr int64_t kRegisterBackoffMaxMs = 5000;

// How long a worker waits for a buffer id that has not appeared yet (its producer may
// still be on the way) before answering NOT_FOUND.
inline constexpr int64_t kBufferWaitMs = 5 * 60 * 1000;

// Deletions ride with the next operation to a worker; those still waiting are sent
// this often, so a client that goes quiet after dropping arrays gets them freed.
inline constexpr int64_t kDeleteFlushPeriodMs = 5;

}  // namespace switchyard::limits
