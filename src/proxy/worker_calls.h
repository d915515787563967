#pragma once

// The worker API as the proxy uses it: one function per call, statuses converted,
// deadlines set, buffers streamed in chunks.

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
                       const std::vector<int64_t>& dims, const std::string& data);
absl::StatusOr<std::string> GetBuffer(WorkerConnection* worker, uint64_t buffer_id);
absl::Status AwaitBuffers(WorkerConnection* worker, const std::vector<uint64_t>& buffer_ids);
absl::StatusOr<CompileResponse> Compile(WorkerConnection* worker, const CompileRequest& request);
absl::Status Execute(WorkerConnection* worker, const ExecuteRequest& request);
void DeleteExecutable(WorkerConnection* worker, uint64_t executable_id);
absl::Status AssembleBuffer(WorkerConnection* worker, const AssembleBufferRequest& request);

}  // namespace switchyard::proxy
