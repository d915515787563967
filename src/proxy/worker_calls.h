#pragma once

// The worker's unary calls as the proxy uses them: the call metadata set, deadlines
// set, buffers streamed in chunks, and a worker that cannot be reached reported as
// DATA_LOSS (its connection's epoch ends). Launches, transfers and deletions go on the
// ordered operation stream instead (`WorkerConnection::Send`).

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/bulk_server.h"
#include "common/host_bytes.h"
#include "proxy/call_set.h"
#include "proxy/host_buffer_store.h"
#include "proxy/worker_connection.h"
#include "switchyard/worker.pb.h"

namespace switchyard::proxy {

// A fresh buffer or executable id: 64 random bits (unique in practice across proxies,
// and not guessable from other ids).
uint64_t NewWorkerObjectId();

// The bytes a put sends: `prefix(n)` returns the first n bytes once it has them (or why
// they will not come); each chunk goes out as soon as it is there.
using BytePrefix = std::function<absl::StatusOr<absl::string_view>(int64_t bytes)>;

// Where a put may offer its bytes for the worker to pull, instead of sending them over
// gRPC: the proxy's data plane (common/bulk_server.h), used for puts of at least
// limits::kBulkMinBytes to workers that pull puts (WORKER_PROTOCOL_PULLS_PUTS).
// `owner` keeps the memory the bytes lie in alive: the plane may still be reading it
// when a failed put returns. No server or no owner: the bytes go inline.
struct PutPlane {
  bulk::Server* server = nullptr;
  std::shared_ptr<const void> owner;
  // An upload streamed through in its window (HostBuffer::SetWindow), which `owner`
  // keeps: the plane reads it straight from the buffer, and the put, either way, tells
  // the buffer which bytes went on. `prefix` then reads it with `StreamFor`.
  const HostBuffer* streamed = nullptr;
  // The put's session has ended: the plane stops waiting on the client's bytes (the
  // upload's RPC may stay open, silent, long after).
  CancelledFn cancelled;
};

// Puts a buffer; returns the epoch it was made in.
absl::StatusOr<uint64_t> PutBuffer(WorkerConnection* worker, uint64_t buffer_id, int64_t device,
                                   DType dtype, const std::vector<int64_t>& dims,
                                   absl::string_view data, const std::string& memory_kind,
                                   const PutPlane& plane = {});
absl::StatusOr<uint64_t> PutBuffer(WorkerConnection* worker, uint64_t buffer_id, int64_t device,
                                   DType dtype, const std::vector<int64_t>& dims, int64_t size,
                                   const std::string& memory_kind, const BytePrefix& prefix,
                                   const PutPlane& plane = {});

// What buffers moved between the proxy and workers took, process-wide (for /metrics).
struct PathCounts {
  std::atomic<int64_t> bulk_bytes{0};    // on a data plane
  std::atomic<int64_t> inline_bytes{0};  // over gRPC
  std::atomic<int64_t> fallbacks{0};     // offers not served, moved inline instead
};
// Puts take the proxy's data plane when they may (PutPlane), gRPC otherwise.
PathCounts& BufferWrites();

// Reads a buffer made in `epoch` by operation `ticket` (waiting on the worker exactly
// until that operation has run). `calls`, if given, can cancel the read.
absl::StatusOr<std::unique_ptr<HostBytes>> GetBuffer(WorkerConnection* worker, uint64_t buffer_id,
                                                     const WorkerConnection::Ticket& ticket,
                                                     CallSet* calls = nullptr);
// The same read, appended piece by piece to `into` (of the buffer's size) as it comes,
// so that a reader of `into` can pass the first bytes on while the rest arrive. Does
// not finish `into`.
absl::Status StreamBuffer(WorkerConnection* worker, uint64_t buffer_id,
                          const WorkerConnection::Ticket& ticket, CallSet* calls, HostBuffer& into);

// Reads take a buffer's bytes from the worker's data plane (common/bulk_server.h) when
// it offers them and the plane can be reached from here, inline over gRPC otherwise.
PathCounts& BufferReads();

struct Compiled {
  CompileResponse response;
  uint64_t epoch = 0;
};
// `calls`, if given, can cancel the compile (its session ended).
absl::StatusOr<Compiled> Compile(WorkerConnection* worker, const CompileRequest& request,
                                 CallSet* calls = nullptr);

// Worker.DescribeProgram for `executable_id` (made in `epoch`).
absl::StatusOr<DescribeProgramResponse> DescribeProgram(WorkerConnection* worker,
                                                        uint64_t executable_id, uint64_t epoch);

// Worker.Trace: opens a profile window, or closes one and returns its spans (10 s
// deadline).
absl::StatusOr<TraceResponse> Trace(WorkerConnection* worker, const TraceRequest& request);

// Asks the worker to drop `session`'s launches that have not started. Best effort, short
// deadline: a worker that does not answer runs them, and frees their outputs after.
void CancelLaunches(WorkerConnection* worker, uint64_t session);

}  // namespace switchyard::proxy
