#pragma once

// The proxy's view of the fleet: devices by global id, the worker that owns each,
// and one connection per worker. Built from the resource manager's `GetFleet`.
// Thread-safe. The proxy never includes worker internals: only worker.proto.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "switchyard/rm.grpc.pb.h"
#include "switchyard/worker.grpc.pb.h"

namespace switchyard::proxy {

// One worker: its stub and the ordered operation stream (`Worker.Dispatch`) the
// proxy keeps open to it. Launches, transfers and deletions are written to the
// stream in the order they are issued and run on the worker in that order, without
// a round trip each: a later operation always sees what an earlier one made, and no
// request waits for a worker unless it asks for a value. Thread-safe.
class WorkerConnection {
 public:
  using Done = std::function<void(absl::Status)>;

  explicit WorkerConnection(std::string address);
  ~WorkerConnection();

  const std::string& address() const { return address_; }
  Worker::Stub* stub() { return stub_.get(); }

  // Sends `op`; `done`, if given, runs (on the reader thread) when the worker has
  // carried it out, with its status; otherwise only a failure is logged.
  void Send(DispatchRequest op, Done done = nullptr)
      ABSL_LOCKS_EXCLUDED(write_mutex_, mutex_);
  // Sends one operation to each of several workers as one step: no other operation to
  // any of them goes in between. A launch spanning hosts must reach every host in the
  // same order relative to everything else sent to them, or its collectives could wait
  // on an operation queued behind another host's part of it.
  static void SendTogether(std::vector<std::pair<WorkerConnection*, DispatchRequest>> ops);
  // Deletes a buffer on the worker, after every operation sent before this call.
  // Never blocks (destructors call it, also on the reader thread): the deletion goes
  // out with the next operation, batched with any others.
  void DeleteLater(uint64_t buffer_id) ABSL_LOCKS_EXCLUDED(mutex_);
  // Sends the deletions waiting for the next operation, if any (without taking the
  // write lock when there are none).
  void SendDeletes() ABSL_LOCKS_EXCLUDED(write_mutex_, mutex_);
  // Waits until the buffers are computed; their error, if any. Ordered after
  // everything sent before.
  absl::Status Await(const std::vector<uint64_t>& buffer_ids);
  // The same without waiting: `done` runs on the reader thread once they are.
  void AwaitThen(const std::vector<uint64_t>& buffer_ids, Done done);
  // Waits until everything sent so far has been carried out.
  void Flush() { (void)Await({}); }

 private:
  void SendLocked(DispatchRequest op, Done done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mutex_)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // (Re)opens the stream.
  void OpenLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mutex_);
  void WriteDeletesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mutex_) ABSL_LOCKS_EXCLUDED(mutex_);
  void Fail(uint64_t seq, const absl::Status& status) ABSL_LOCKS_EXCLUDED(mutex_);
  void ReadLoop(std::shared_ptr<grpc::ClientContext> context,
                std::shared_ptr<grpc::ClientReaderWriter<DispatchRequest, DispatchResponse>> stream,
                uint64_t generation);

  const std::string address_;
  std::unique_ptr<Worker::Stub> stub_;
  // Held while writing, so operations go out in order and one at a time. Never
  // taken by the reader, which only needs `mutex_`.
  absl::Mutex write_mutex_ ABSL_ACQUIRED_BEFORE(mutex_);
  uint64_t next_seq_ ABSL_GUARDED_BY(write_mutex_) = 1;
  uint64_t generation_ ABSL_GUARDED_BY(write_mutex_) = 0;
  std::shared_ptr<grpc::ClientContext> context_ ABSL_GUARDED_BY(write_mutex_);
  std::shared_ptr<grpc::ClientReaderWriter<DispatchRequest, DispatchResponse>> stream_
      ABSL_GUARDED_BY(write_mutex_);
  std::vector<std::thread> readers_ ABSL_GUARDED_BY(write_mutex_);
  absl::Mutex mutex_;
  struct Waiter {
    uint64_t generation;
    Done done;
  };
  std::map<uint64_t, Waiter> waiting_ ABSL_GUARDED_BY(mutex_);
  std::vector<uint64_t> pending_deletes_ ABSL_GUARDED_BY(mutex_);
};

struct DeviceEntry {
  DeviceInfo info;  // global id, slice, host, local ordinal, kind, memories
  std::string worker_address;
  PluginInfo plugin;
};

class Fleet {
 public:
  explicit Fleet(std::string rm_address);
  ~Fleet();

  // Re-reads the fleet from the RM (healthy hosts only). UNAVAILABLE if the RM
  // cannot be reached; FAILED_PRECONDITION if no worker is up.
  absl::Status Refresh() ABSL_LOCKS_EXCLUDED(mutex_);

  std::vector<DeviceEntry> Devices() const ABSL_LOCKS_EXCLUDED(mutex_);
  // The connection to a worker, created on first use; lives as long as the fleet.
  WorkerConnection* Connection(const std::string& address) ABSL_LOCKS_EXCLUDED(mutex_);

  // A fresh id (never 0) for a launch spanning workers: its parts on every worker carry
  // it, and no two such launches in this proxy share one.
  int32_t NextLaunchId();

 private:
  const std::string rm_address_;
  std::unique_ptr<ResourceManager::Stub> rm_;
  mutable absl::Mutex mutex_;
  std::map<int64_t, DeviceEntry> devices_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, std::unique_ptr<WorkerConnection>> connections_ ABSL_GUARDED_BY(mutex_);
  std::atomic<uint32_t> launches_{0};
  // Sends the deletions no operation has carried along yet (kDeleteFlushPeriodMs):
  // a request that drops arrays then costs no write to a worker.
  absl::Notification stop_;
  std::thread delete_flusher_;
};

}  // namespace switchyard::proxy
