#pragma once

// The worker's unary calls as the proxy uses them: statuses converted, deadlines set,
// buffers streamed in chunks. Launches, transfers and deletions go on the ordered
// operation stream instead (`WorkerConnection::Send`).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proxy/fleet.h"
#include "switchyard/worker.pb.h"

namespace switchyard::proxy {

// A fresh buffer or executable id, unique across this proxy process.
uint64_t NewWorkerObjectId();

absl::Status PutBuffer(WorkerConnection* worker, uint64_t buffer_id, int64_t device, DType dtype,
                       const std::vector<int64_t>& dims, const std::string& data,
                       const std::string& memory_kind);
absl::StatusOr<std::string> GetBuffer(WorkerConnection* worker, uint64_t buffer_id);
absl::StatusOr<CompileResponse> Compile(WorkerConnection* worker, const CompileRequest& request);

}  // namespace switchyard::proxy
