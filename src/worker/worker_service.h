#pragma once

// gRPC adapter for worker.proto: validates each request, delegates to the
// buffer store and the executor, and converts status at the edge.

#include <string>

#include "absl/synchronization/mutex.h"
#include "pjrt/client.h"
#include "switchyard/worker.grpc.pb.h"
#include "worker/buffer_store.h"
#include "worker/device_map.h"
#include "worker/executor.h"
#include "worker/transfers.h"

namespace switchyard::worker {

struct WorkerIdentity {
  int slice_index = 0;
  int host_index = 0;
  PluginInfo plugin;
};

class WorkerService final : public ::switchyard::Worker::Service {
 public:
  WorkerService(WorkerIdentity identity, const pjrt::Client* client, const DeviceMap* devices,
                BufferStore* buffers, Executor* executor, Transfers* transfers)
      : identity_(std::move(identity)),
        client_(client),
        devices_(devices),
        buffers_(buffers),
        executor_(executor),
        transfers_(transfers) {}

  // The address is known only once the server has bound its port.
  void SetAddress(std::string address) ABSL_LOCKS_EXCLUDED(mutex_);

  grpc::Status GetInfo(grpc::ServerContext* context, const GetInfoRequest* request,
                       GetInfoResponse* response) override;
  grpc::Status PutBuffer(grpc::ServerContext* context, grpc::ServerReader<PutBufferChunk>* reader,
                         PutBufferResponse* response) override;
  grpc::Status GetBuffer(grpc::ServerContext* context, const GetBufferRequest* request,
                         grpc::ServerWriter<GetBufferChunk>* writer) override;
  grpc::Status DeleteBuffers(grpc::ServerContext* context, const DeleteBuffersRequest* request,
                             DeleteBuffersResponse* response) override;
  grpc::Status Compile(grpc::ServerContext* context, const CompileRequest* request,
                       CompileResponse* response) override;
  grpc::Status Execute(grpc::ServerContext* context, const ExecuteRequest* request,
                       ExecuteResponse* response) override;
  grpc::Status DeleteExecutables(grpc::ServerContext* context,
                                 const DeleteExecutablesRequest* request,
                                 DeleteExecutablesResponse* response) override;
  grpc::Status Dispatch(grpc::ServerContext* context,
                        grpc::ServerReaderWriter<DispatchResponse, DispatchRequest>* stream) override;
  grpc::Status GetStats(grpc::ServerContext* context, const GetStatsRequest* request,
                        WorkerStats* response) override;

 private:
  absl::Status ReceiveBuffer(grpc::ServerReader<PutBufferChunk>* reader);

  const WorkerIdentity identity_;
  absl::Mutex mutex_;
  std::string address_ ABSL_GUARDED_BY(mutex_);
  const pjrt::Client* client_;
  const DeviceMap* devices_;
  BufferStore* buffers_;
  Executor* executor_;
  Transfers* transfers_;
};

}  // namespace switchyard::worker
