#pragma once

// gRPC adapter for worker.proto: validates each request, delegates to the
// buffer store and the executor, and converts status at the edge.

#include <string>

#include "absl/synchronization/mutex.h"
#include "common/bulk_server.h"
#include "common/limits.h"
#include "pjrt/client.h"
#include "switchyard/worker.grpc.pb.h"
#include "worker/buffer_store.h"
#include "worker/colocated_calls.h"
#include "worker/device_map.h"
#include "worker/executor.h"
#include "worker/host_callbacks.h"
#include "worker/owner_leases.h"
#include "worker/shard_storage.h"
#include "worker/stream_progress.h"
#include "worker/transfers.h"

namespace switchyard::worker {

struct WorkerIdentity {
  int slice_index = 0;
  int host_index = 0;
  PluginInfo plugin;
  std::string boot_id;  // random per process
};

class WorkerService final : public ::switchyard::Worker::Service {
 public:
  WorkerService(WorkerIdentity identity, const pjrt::Client* client, const DeviceMap* devices,
                BufferStore* buffers, Executor* executor, Transfers* transfers,
                StreamProgress* progress, HostCallbacks* callbacks = nullptr,
                ShardStorage* storage = nullptr, ColocatedCalls* colocated = nullptr)
      : identity_(std::move(identity)),
        client_(client),
        devices_(devices),
        buffers_(buffers),
        executor_(executor),
        transfers_(transfers),
        progress_(progress),
        callbacks_(callbacks),
        storage_(storage),
        colocated_(colocated),
        leases_(absl::Milliseconds(limits::kOwnerLeaseGraceMs)) {}

  // The address is known only once the server has bound its port.
  void SetAddress(std::string address) ABSL_LOCKS_EXCLUDED(mutex_);
  // Where reads that ask for it get their bytes (GetBufferRequest.bulk); null: inline.
  // Set before the server starts; outlives it.
  void SetBulkServer(bulk::Server* bulk) { bulk_ = bulk; }
  // For /metrics: put bytes pulled from senders' data planes, and offers of puts that
  // were not served there (their bytes came inline).
  int64_t put_bytes_pulled() const { return put_bytes_pulled_.load(); }
  int64_t put_fallbacks() const { return put_fallbacks_.load(); }
  // Reads of small buffers over a Dispatch stream (read_buffer) taken on.
  int64_t stream_reads() const { return stream_reads_.load(); }

  grpc::Status GetInfo(grpc::ServerContext* context, const GetInfoRequest* request,
                       GetInfoResponse* response) override;
  grpc::Status PutBuffer(grpc::ServerContext* context, grpc::ServerReader<PutBufferChunk>* reader,
                         PutBufferResponse* response) override;
  grpc::Status OfferBuffers(grpc::ServerContext* context, const OfferBuffersRequest* request,
                            OfferBuffersResponse* response) override;
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
  grpc::Status Dispatch(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<DispatchResponse, DispatchRequest>* stream) override;
  grpc::Status GetStats(grpc::ServerContext* context, const GetStatsRequest* request,
                        WorkerStats* response) override;
  grpc::Status CancelLaunches(grpc::ServerContext* context, const CancelLaunchesRequest* request,
                              CancelLaunchesResponse* response) override;
  grpc::Status DescribeProgram(grpc::ServerContext* context, const DescribeProgramRequest* request,
                               DescribeProgramResponse* response) override;
  grpc::Status Trace(grpc::ServerContext* context, const TraceRequest* request,
                     TraceResponse* response) override;
  grpc::Status ReturnHostCallback(grpc::ServerContext* context, const HostCallbackResult* request,
                                  ReturnHostCallbackResponse* response) override;

  // Frees what owners whose lease ran out made (they died, or reconnected under a new
  // id); called periodically.
  void ReleaseExpiredOwners() ABSL_LOCKS_EXCLUDED(leases_mutex_);

 private:
  // The caller's owner id (0 if it sent none); DATA_LOSS if it expects another boot of
  // this worker (what it made here is gone with that process).
  absl::StatusOr<uint64_t> CheckCaller(const grpc::ServerContext& context) const;
  void Touch(uint64_t owner) ABSL_LOCKS_EXCLUDED(leases_mutex_);
  absl::Status ReceiveBuffer(grpc::ServerReader<PutBufferChunk>* reader, uint64_t owner,
                             PutBufferResponse* response);
  // A put's bytes from the sender's data plane into `data`; a plane that did not serve
  // them is OK with `response` asking for them inline.
  absl::Status PullPut(const BufferHeader& header, const BulkOffer& offer, HostBytes& data,
                       PutBufferResponse* response);
  // A string array's shard (DType STRING) as StringArrayContents.
  absl::Status ReceiveStrings(PutBufferChunk& first, grpc::ServerReader<PutBufferChunk>* reader,
                              uint64_t owner);
  absl::Status ServeStrings(uint64_t id, const StoredBuffer& stored,
                            grpc::ServerWriter<GetBufferChunk>* writer);
  absl::Status ServeBuffer(grpc::ServerContext* context, const GetBufferRequest& request,
                           grpc::ServerWriter<GetBufferChunk>* writer);
  // The buffer a read names, once the operation making it has run (as the read says).
  absl::StatusOr<std::shared_ptr<const StoredBuffer>> FindRead(grpc::ServerContext* context,
                                                               const GetBufferRequest& request);
  // A read's header and offer on the data plane (FAILED_PRECONDITION: read it inline).
  absl::Status Offer(grpc::ServerContext* context, const GetBufferRequest& request,
                     BufferOffer* offer);
  // Carries out one operation of a Dispatch stream whose answer is its status (a launch:
  // once it is enqueued), on the stream's thread.
  absl::Status RunOperation(const DispatchRequest& request, uint64_t owner,
                            grpc::ServerContext* context,
                            const std::shared_ptr<HostCallbacks::Stream>& callback_stream);
  absl::StatusOr<BulkOffer> OfferBulk(const std::shared_ptr<const StoredBuffer>& stored);

  const WorkerIdentity identity_;
  absl::Mutex mutex_;
  std::string address_ ABSL_GUARDED_BY(mutex_);
  const pjrt::Client* client_;
  const DeviceMap* devices_;
  BufferStore* buffers_;
  Executor* executor_;
  Transfers* transfers_;
  StreamProgress* progress_;
  HostCallbacks* callbacks_;   // may be null
  ShardStorage* storage_;      // may be null: saves and loads are refused
  ColocatedCalls* colocated_;  // may be null: colocated Python is refused
  bulk::Server* bulk_ = nullptr;
  std::atomic<int64_t> put_bytes_pulled_{0};
  std::atomic<int64_t> stream_reads_{0};
  std::atomic<int64_t> put_fallbacks_{0};
  absl::Mutex leases_mutex_;
  OwnerLeases leases_ ABSL_GUARDED_BY(leases_mutex_);
};

}  // namespace switchyard::worker
