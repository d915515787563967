#pragma once

// Colocated Python (jax.experimental.colocated_python) on this host: each session gets
// its own sidecar process, started at its first call and restarted after a crash. A
// call hands the sidecar this worker's input shards through files in a shared-memory
// directory, and makes the output buffers from the files it writes back.
// Thread-safe; calls of one session run one at a time.

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "pjrt/client.h"
#include "switchyard/worker.pb.h"
#include "worker/buffer_store.h"
#include "worker/device_map.h"
#include "worker/sidecar_process.h"

namespace switchyard::worker {

class ColocatedCalls {
 public:
  // `python`: the interpreter that runs sidecars (with jax, cloudpickle and switchyard;
  // empty: calls fail with FAILED_PRECONDITION). `shm_directory`: where arrays pass
  // between worker and sidecar (a memory-backed directory such as /dev/shm).
  ColocatedCalls(const pjrt::Client* client, const DeviceMap* devices, BufferStore* buffers,
                 std::string python, std::string shm_directory)
      : client_(client),
        devices_(devices),
        buffers_(buffers),
        python_(std::move(python)),
        shm_directory_(std::move(shm_directory)) {}

  // Runs the call to completion on this thread, for `owner`. The outputs are stored
  // under their ids; on failure (a Python exception carries its traceback, a crash says
  // how the sidecar ended) the error is stored under every output id and returned.
  // `cancelled` (may be null) says the caller has gone: the call's sidecar is then
  // stopped and the call fails CANCELLED.
  absl::Status Run(const ColocatedCallRequest& request, uint64_t owner,
                   const std::function<bool()>& cancelled = nullptr) ABSL_LOCKS_EXCLUDED(mutex_);
  // Stops the sidecars of a session, or of everything `owner` made.
  void EndSession(uint64_t session) ABSL_LOCKS_EXCLUDED(mutex_);
  void EndOwner(uint64_t owner) ABSL_LOCKS_EXCLUDED(mutex_);
  int64_t sidecars() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  struct Sidecar {
    absl::Mutex mutex;  // one call at a time
    std::unique_ptr<SidecarProcess> process ABSL_GUARDED_BY(mutex);
    std::string world ABSL_GUARDED_BY(mutex);  // the hosts it was started with
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
                    const std::string& prefix, const std::function<bool()>& cancelled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(sidecar.mutex);

  const pjrt::Client* client_;
  const DeviceMap* devices_;
  BufferStore* buffers_;
  const std::string python_;
  const std::string shm_directory_;
  mutable absl::Mutex mutex_;
  std::map<Key, std::shared_ptr<Sidecar>> sidecars_ ABSL_GUARDED_BY(mutex_);
  uint64_t clock_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t next_call_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace switchyard::worker
