#pragma once

// The worker's devices and their global ids (known once the RM has admitted us).
// Thread-safe.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "pjrt/client.h"
#include "switchyard/common.pb.h"

namespace switchyard::worker {

class DeviceMap {
 public:
  explicit DeviceMap(const pjrt::Client* client) : client_(client) {}

  // Local descriptions for registration (global ids unset).
  std::vector<DeviceInfo> LocalDevices() const;
  // Records the ids the RM assigned; `devices` come back in `LocalDevices` order.
  void SetGlobalIds(const std::vector<DeviceInfo>& devices) ABSL_LOCKS_EXCLUDED(mutex_);
  bool registered() const ABSL_LOCKS_EXCLUDED(mutex_);
  std::vector<DeviceInfo> Devices() const ABSL_LOCKS_EXCLUDED(mutex_);

  // Before registration these wait up to limits::kRegistrationWaitMs for the ids (the RM
  // may have listed this worker already), then UNAVAILABLE; NOT_FOUND for an id that is
  // not ours.
  absl::StatusOr<int> OrdinalOf(int64_t global_id) const ABSL_LOCKS_EXCLUDED(mutex_);
  absl::StatusOr<int64_t> GlobalIdOf(int ordinal) const ABSL_LOCKS_EXCLUDED(mutex_);
  // The plugin's own device id for an ordinal (what device assignments name).
  int PluginIdOf(int ordinal) const { return client_->devices()[ordinal].id; }
  int size() const { return static_cast<int>(client_->devices().size()); }

 private:
  // Waits (bounded) until the ids are known; false if they are not.
  bool AwaitIdsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const pjrt::Client* client_;
  mutable absl::Mutex mutex_;
  std::vector<DeviceInfo> devices_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace switchyard::worker
