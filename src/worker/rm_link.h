#pragma once

// Keeps the worker registered with the resource manager: registers (retrying
// with backoff while the RM is unreachable), heartbeats, and registers again when
// the RM no longer knows us. Runs one thread; `on_fatal` is called from it, once,
// when the RM refuses us or stays unreachable past the timeout. Each heartbeat says
// what the worker holds (its resident memory, and `Reports::buffer_bytes`) for the RM's
// status, and which of the RM's gang numbers it passed (`Reports::gang_passed`).

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "switchyard/rm.grpc.pb.h"
#include "worker/device_map.h"

namespace switchyard::worker {

// Asks the RM at `rm_address` which of its gang numbers `first`..`last` of `sequencer`
// for host (slice, host) will never come (all of them if the RM does not give that
// numbering): Executor::GangVoids. The function owns its channel; it is thread-safe
// and blocks up to a second a call.
std::function<absl::StatusOr<std::vector<uint64_t>>(uint64_t sequencer, uint64_t first,
                                                    uint64_t last)>
GangVoidsAsker(const std::string& rm_address, int slice_index, int host_index);

class RmLink {
 public:
  // What heartbeats carry, and what a registration tells; any may be null.
  struct Reports {
    std::function<int64_t()> buffer_bytes;
    std::function<std::pair<uint64_t, uint64_t>()> gang_passed;  // sequencer, number
    // The RM's gang numbering and the first number it gives this host from now on.
    std::function<void(uint64_t sequencer, uint64_t first)> gang_start;
  };

  RmLink(std::string rm_address, RegisterWorkerRequest request, DeviceMap* devices,
         absl::Duration register_timeout, std::function<void(absl::Status)> on_fatal,
         Reports reports = {});
  ~RmLink();

  void Start();
  // Stops the thread and waits for it. Idempotent; not from `on_fatal`.
  void Stop();

 private:
  void Run();
  // OK once registered; a non-OK, non-retryable status is fatal.
  absl::Status RegisterWithBackoff();
  // Sleeps unless stopped; returns false if stopped.
  bool Sleep(absl::Duration duration) { return !stop_.WaitForNotificationWithTimeout(duration); }

  const std::string rm_address_;
  const RegisterWorkerRequest request_;
  DeviceMap* devices_;
  const absl::Duration register_timeout_;
  std::function<void(absl::Status)> on_fatal_;
  const Reports reports_;
  std::unique_ptr<ResourceManager::Stub> stub_;
  uint64_t incarnation_ = 0;
  absl::Duration heartbeat_period_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace switchyard::worker
