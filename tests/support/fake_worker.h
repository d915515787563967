#pragma once

// A worker with no PJRT plugin behind it, for tests of what sits on the proxy's side of
// worker.proto (sessions, connections, the fleet). It speaks the protocol the real worker
// does, at the protocol version it is given, registers with a real RM and heartbeats;
// buffers are bytes in memory, and the one program it runs is `kAddOneProgram`
// (y = x + 1 over f32), computed here. Every operation is carried out on the stream
// that brings it, so what a test sees follows from what it did, not from timing.
//
// What a real worker cannot be made to do on cue, this one can: crash (every stream and
// call fails, heartbeats stop), restart (a new boot: nothing it held is kept), and stop
// reading its operation streams (a hung worker that still heartbeats).
//
// Served over gRPC's in-process transport: no socket. Thread-safe.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_server.h"
#include "switchyard/rm.grpc.pb.h"
#include "switchyard/worker.grpc.pb.h"

namespace switchyard::test_support {

class FakeWorker final : public Worker::Service {
 public:
  struct Options {
    std::string rm_address;
    int slice_index = 0;
    int devices = 2;
    // A WorkerProtocol: what the proxy may send it.
    uint32_t protocol_version = WORKER_PROTOCOL_STREAM_READS;
  };

  // Serves, and registers with the RM (waits up to 10 s for its device ids).
  static absl::StatusOr<std::unique_ptr<FakeWorker>> Start(const Options& options);
  ~FakeWorker() override;
  FakeWorker(const FakeWorker&) = delete;
  FakeWorker& operator=(const FakeWorker&) = delete;

  const std::string& address() const { return address_; }
  std::string boot_id() const ABSL_LOCKS_EXCLUDED(mutex_);
  // Operations its streams have carried out, of every boot.
  int64_t operations() const { return operations_.load(); }
  int64_t buffers() const ABSL_LOCKS_EXCLUDED(mutex_);

  // As if the process died: its streams are cancelled, every call fails UNAVAILABLE,
  // and it no longer heartbeats (the RM marks it dead once they are missed).
  void Crash() ABSL_LOCKS_EXCLUDED(mutex_);
  // A new process at the same address: a new boot id, nothing kept, registered again.
  void Restart() ABSL_LOCKS_EXCLUDED(mutex_);
  // Its streams carry out no more operations (the next one each reads is held, and the
  // transport takes none after it) until ResumeReading; heartbeats go on: a hung worker.
  void StopReading() ABSL_LOCKS_EXCLUDED(mutex_);
  void ResumeReading() ABSL_LOCKS_EXCLUDED(mutex_);

  // worker.proto
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
  grpc::Status DeleteExecutables(grpc::ServerContext* context,
                                 const DeleteExecutablesRequest* request,
                                 DeleteExecutablesResponse* response) override;
  grpc::Status GetStats(grpc::ServerContext* context, const GetStatsRequest* request,
                        WorkerStats* response) override;
  grpc::Status CancelLaunches(grpc::ServerContext* context, const CancelLaunchesRequest* request,
                              CancelLaunchesResponse* response) override;
  grpc::Status Dispatch(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<DispatchResponse, DispatchRequest>* stream) override;

 private:
  struct Buffer {
    BufferHeader header;
    std::string bytes;
    absl::Status status;  // its error, in place of the bytes
  };
  struct Executable {
    int64_t device = 0;  // global id
    std::string name;
  };

  explicit FakeWorker(const Options& options);
  // The call is for this process (not a crashed one, nor an earlier boot).
  absl::Status CheckCall(const grpc::ServerContext& context) const ABSL_LOCKS_EXCLUDED(mutex_);
  absl::Status Register() ABSL_LOCKS_EXCLUDED(mutex_);
  void HeartbeatLoop();
  absl::Status Run(const DispatchRequest& request) ABSL_LOCKS_EXCLUDED(mutex_);
  absl::Status Launch(const ExecuteRequest& request) ABSL_LOCKS_EXCLUDED(mutex_);
  absl::Status Assemble(const AssembleBufferRequest& request) ABSL_LOCKS_EXCLUDED(mutex_);
  // A buffer of this worker or, by address, of another fake in this process.
  absl::StatusOr<Buffer> Source(const BufferPiece& piece) ABSL_LOCKS_EXCLUDED(mutex_);
  // Its bytes, or its error; NOT_FOUND once `wait` has passed without it.
  absl::StatusOr<Buffer> Find(uint64_t id, absl::Duration wait) const ABSL_LOCKS_EXCLUDED(mutex_);
  bool OwnsDevice(int64_t global_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void CancelStreamsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const Options options_;
  std::unique_ptr<ResourceManager::Stub> rm_;
  std::string address_;
  StartedServer server_;
  std::atomic<int64_t> operations_{0};

  mutable absl::Mutex mutex_;
  std::string boot_id_ ABSL_GUARDED_BY(mutex_);
  bool crashed_ ABSL_GUARDED_BY(mutex_) = false;
  bool reading_ ABSL_GUARDED_BY(mutex_) = true;
  uint64_t incarnation_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::Duration heartbeat_period_ ABSL_GUARDED_BY(mutex_) = absl::Milliseconds(100);
  std::vector<DeviceInfo> devices_ ABSL_GUARDED_BY(mutex_);  // with global ids
  std::map<uint64_t, Buffer> buffers_ ABSL_GUARDED_BY(mutex_);
  std::map<uint64_t, Executable> executables_ ABSL_GUARDED_BY(mutex_);
  // Dispatch streams open now, to cancel on a crash.
  std::set<grpc::ServerContext*> streams_ ABSL_GUARDED_BY(mutex_);
  // By the proxy's stream id: the last operation carried out, and whether it ended.
  std::map<uint64_t, uint64_t> progress_ ABSL_GUARDED_BY(mutex_);
  std::set<uint64_t> ended_streams_ ABSL_GUARDED_BY(mutex_);

  absl::Notification stop_;
  std::thread heartbeats_;
};

}  // namespace switchyard::test_support
