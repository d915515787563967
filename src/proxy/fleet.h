#pragma once

// The proxy's view of the fleet: devices by global id, the worker that owns each,
// and one connection per worker. Built from the resource manager's `GetFleet`.
// Thread-safe. The proxy never includes worker internals: only worker.proto.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "switchyard/rm.grpc.pb.h"
#include "switchyard/worker.grpc.pb.h"

namespace switchyard::proxy {

// One worker: its stub and its dispatch queue. Launches, transfers and deletions
// for the worker run on one thread in the order they were queued, so a later
// operation always sees the buffers and executables an earlier one made, and the
// request path never waits for a worker. Deletions queued back to back go as one
// batch.
class WorkerConnection {
 public:
  explicit WorkerConnection(std::string address);
  ~WorkerConnection();  // runs what is queued first

  const std::string& address() const { return address_; }
  Worker::Stub* stub() { return stub_.get(); }

  // Runs `call` on the dispatch thread after everything queued before it.
  void Enqueue(std::function<void()> call) ABSL_LOCKS_EXCLUDED(mutex_);
  // Queues a buffer for deletion, after everything queued before it.
  void DeleteLater(uint64_t buffer_id) ABSL_LOCKS_EXCLUDED(mutex_);
  // Waits until everything queued so far has run.
  void Flush() ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  using Item = std::variant<std::function<void()>, std::vector<uint64_t>>;
  void Loop();
  void DeleteBuffers(const std::vector<uint64_t>& ids);

  const std::string address_;
  std::unique_ptr<Worker::Stub> stub_;
  absl::Mutex mutex_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mutex_);
  bool busy_ ABSL_GUARDED_BY(mutex_) = false;
  bool stop_ ABSL_GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

struct DeviceEntry {
  DeviceInfo info;  // global id, slice, host, local ordinal, kind, memories
  std::string worker_address;
  PluginInfo plugin;
};

class Fleet {
 public:
  explicit Fleet(std::string rm_address);

  // Re-reads the fleet from the RM (healthy hosts only). UNAVAILABLE if the RM
  // cannot be reached; FAILED_PRECONDITION if no worker is up.
  absl::Status Refresh() ABSL_LOCKS_EXCLUDED(mutex_);

  std::vector<DeviceEntry> Devices() const ABSL_LOCKS_EXCLUDED(mutex_);
  // NOT_FOUND for an id no healthy worker has.
  absl::StatusOr<DeviceEntry> Device(int64_t id) const ABSL_LOCKS_EXCLUDED(mutex_);
  // The connection to a worker, created on first use; lives as long as the fleet.
  WorkerConnection* Connection(const std::string& address) ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  const std::string rm_address_;
  std::unique_ptr<ResourceManager::Stub> rm_;
  mutable absl::Mutex mutex_;
  std::map<int64_t, DeviceEntry> devices_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, std::unique_ptr<WorkerConnection>> connections_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace switchyard::proxy
