#pragma once

// The worker's unary calls as the proxy uses them: statuses converted, deadlines set,
// buffers streamed in chunks. Launches, transfers and deletions go on the ordered
// operation stream instead (`WorkerConnection::Send`).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/host_bytes.h"
#include "proxy/fleet.h"
#include "switchyard/worker.pb.h"

namespace switchyard::proxy {

// A fresh buffer or executable id, unique across this proxy process.
uint64_t NewWorkerObjectId();

absl::Status PutBuffer(WorkerConnection* worker, uint64_t buffer_id, int64_t device, DType dtype,
                       const std::vector<int64_t>& dims, absl::string_view data,
                       const std::string& memory_kind);
// The same for `size` bytes that may still be arriving: `prefix(n)` returns the first
// n bytes once it has them (or why they will not come); each chunk goes out as soon
// as it is there.
using BytePrefix = std::function<absl::StatusOr<absl::string_view>(int64_t bytes)>;
absl::Status PutBuffer(WorkerConnection* worker, uint64_t buffer_id, int64_t device, DType dtype,
                       const std::vector<int64_t>& dims, int64_t size,
                       const std::string& memory_kind, const BytePrefix& prefix);
absl::StatusOr<std::unique_ptr<HostBytes>> GetBuffer(WorkerConnection* worker,
                                                      uint64_t buffer_id);
absl::StatusOr<CompileResponse> Compile(WorkerConnection* worker, const CompileRequest& request);

}  // namespace switchyard::proxy
