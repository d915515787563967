#pragma once

// Keeps the worker registered with the resource manager: registers (retrying
// with backoff while the RM is unreachable), heartbeats, and registers again when
// the RM no longer knows us. Runs one thread; `on_fatal` is called from it, once,
// when the RM refuses us or stays unreachable past the timeout. Each heartbeat says
// what the worker holds (its resident memory, and `buffer_bytes()`) for the RM's status.

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "switchyard/rm.grpc.pb.h"
#include "worker/device_map.h"

namespace switchyard::worker {

class RmLink {
 public:
  RmLink(std::string rm_address, RegisterWorkerRequest request, DeviceMap* devices,
         absl::Duration register_timeout, std::function<void(absl::Status)> on_fatal,
         std::function<int64_t()> buffer_bytes = nullptr);
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
  std::function<int64_t()> buffer_bytes_;
  std::unique_ptr<ResourceManager::Stub> stub_;
  uint64_t incarnation_ = 0;
  absl::Duration heartbeat_period_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace switchyard::worker
