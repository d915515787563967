#pragma once

// Colocated Python (jax.experimental.colocated_python) on this host: each session gets
// its own sidecar process, started at its first call and restarted after a crash. A
// call's arrays pass in two sealed shared-memory files handed to the sidecar with the
// call (common/shared_memory.h): the worker copies the input shards into one, the
// sidecar copies them out and its outputs into the other, whose pages become the
// device buffers where the plugin uses host memory in place (CPU). The files are kept
// for the same sidecar's next calls, so their pages are there already.
// Thread-safe; calls of one session run one at a time.

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/shared_memory.h"
#include "pjrt/client.h"
#include "switchyard/worker.pb.h"
#include "worker/buffer_store.h"
#include "worker/device_map.h"
#include "worker/sidecar_process.h"

namespace switchyard::worker {

struct ColocatedOptions {
  // The interpreter that runs sidecars (with jax, cloudpickle and switchyard); empty:
  // calls fail with FAILED_PRECONDITION and `off_reason`.
  std::string python;
  std::string off_reason;
  // Where arrays pass between worker and sidecar (a memory-backed directory such as
  // /dev/shm): each sidecar gets a private directory there (0700, a random name).
  std::string shm_directory = "/dev/shm";
  // Sidecars run in a sandbox (SidecarSandbox) that hides `hidden` and leaves only
  // `writable` (and their own directory) writable; false: as this worker, unconfined.
  bool sandbox = true;
  std::vector<std::string> hidden;
  std::vector<std::string> writable;
};

class ColocatedCalls {
 public:
  ColocatedCalls(const pjrt::Client* client, const DeviceMap* devices, BufferStore* buffers,
                 ColocatedOptions options)
      : client_(client), devices_(devices), buffers_(buffers), options_(std::move(options)) {}

  // Removes the private directories that sidecars of workers no longer running left in
  // `shm_directory` (a worker killed with -9 cannot).
  static void RemoveStaleDirectories(const std::string& shm_directory);

  // Runs the call to completion on this thread, for `owner`. The outputs are stored
  // under their ids; on failure (a Python exception carries its traceback, a crash says
  // how the sidecar ended) the error is stored under every output id and returned.
  // `cancelled` (may be null) says the caller has gone: the call's sidecar is then
  // stopped and the call fails CANCELLED.
  absl::Status Run(const ColocatedCallRequest& request, uint64_t owner,
                   const std::function<bool()>& cancelled = nullptr) ABSL_LOCKS_EXCLUDED(mutex_);
  // Stops the sidecars of `owner`'s session, or of everything `owner` made.
  void EndSession(uint64_t owner, uint64_t session) ABSL_LOCKS_EXCLUDED(mutex_);
  void EndOwner(uint64_t owner) ABSL_LOCKS_EXCLUDED(mutex_);
  int64_t sidecars() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  struct Sidecar {
    ~Sidecar();         // stops the process, then removes `directory`
    absl::Mutex mutex;  // one call at a time
    std::unique_ptr<SidecarProcess> process ABSL_GUARDED_BY(mutex);
    std::string world ABSL_GUARDED_BY(mutex);  // the hosts it was started with
    std::string label ABSL_GUARDED_BY(mutex);  // "sidecar-<n>", for logs and ps
    // Its private directory in the shared-memory directory; empty until first started.
    std::string directory ABSL_GUARDED_BY(mutex);
    // Its calls' array files, kept for its next calls (never another sidecar's).
    SharedMemoryPool files{"switchyard-colocated"};
    // The running process, for stopping it while a call holds `mutex`; 0: none.
    std::atomic<pid_t> pid{0};
    uint64_t owner = 0;
    uint64_t last_used = 0;  // ColocatedCalls::clock_ when last called
  };
  using Key = std::pair<uint64_t, uint64_t>;  // owner, session

  // Stops (SIGKILL) and forgets the sidecars whose key matches.
  void StopWhere(const std::function<bool(const Key&)>& doomed_key) ABSL_LOCKS_EXCLUDED(mutex_);
  std::shared_ptr<Sidecar> SidecarFor(uint64_t owner, uint64_t session) ABSL_LOCKS_EXCLUDED(mutex_);
  // Starts the process if it is not running (forming the JAX world of `request`).
  absl::Status EnsureStarted(Sidecar& sidecar, const ColocatedCallRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(sidecar.mutex);
  absl::Status Call(Sidecar& sidecar, const ColocatedCallRequest& request, uint64_t owner,
                    const std::function<bool()>& cancelled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(sidecar.mutex);
  // The inputs' bytes in one sealed memory file of the sidecar's (null: none), each
  // shard on its own pages; `run` says where.
  absl::StatusOr<std::shared_ptr<SharedMemoryFile>> PackInputs(Sidecar& sidecar,
                                                               const ColocatedCallRequest& request,
                                                               SidecarCall* run)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(sidecar.mutex);
  // Where each output shard goes in the outputs' file (`run`); returns the file's size.
  absl::StatusOr<int64_t> LayOutOutputs(const ColocatedCallRequest& request,
                                        SidecarCall* run) const;
  // Stores the sidecar's outputs as device buffers under the request's ids, mapped from
  // `outputs` where `run` placed them.
  absl::Status StoreOutputs(const ColocatedCallRequest& request, const SidecarCall& run,
                            const SidecarReply& reply, SharedMemoryFile* outputs, uint64_t owner);

  const pjrt::Client* client_;
  const DeviceMap* devices_;
  BufferStore* buffers_;
  const ColocatedOptions options_;
  mutable absl::Mutex mutex_;
  std::map<Key, std::shared_ptr<Sidecar>> sidecars_ ABSL_GUARDED_BY(mutex_);
  uint64_t clock_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t next_call_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t next_sidecar_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace switchyard::worker
