#include "worker/device_map.h"

#include "absl/strings/str_cat.h"
#include "common/limits.h"

namespace switchyard::worker {

std::vector<DeviceInfo> DeviceMap::LocalDevices() const {
  std::vector<DeviceInfo> out;
  for (const pjrt::DeviceDesc& desc : client_->devices()) {
    DeviceInfo info;
    info.set_local_ordinal(desc.ordinal);
    info.set_local_hardware_id(desc.local_hardware_id);
    info.set_plugin_id(desc.id);
    info.set_kind(desc.kind);
    info.set_default_memory_kind(desc.default_memory_kind);
    for (const pjrt::MemoryDesc& memory : desc.memories) {
      MemoryInfo* m = info.add_memories();
      m->set_local_id(memory.id);
      m->set_kind(memory.kind);
    }
    out.push_back(std::move(info));
  }
  return out;
}

void DeviceMap::SetGlobalIds(const std::vector<DeviceInfo>& devices) {
  absl::MutexLock lock(&mutex_);
  devices_ = devices;
}

bool DeviceMap::registered() const {
  absl::MutexLock lock(&mutex_);
  return !devices_.empty();
}

std::vector<DeviceInfo> DeviceMap::Devices() const {
  absl::MutexLock lock(&mutex_);
  return devices_.empty() ? LocalDevices() : devices_;
}

bool DeviceMap::AwaitIdsLocked() const {
  auto known = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return !devices_.empty(); };
  return mutex_.AwaitWithTimeout(absl::Condition(&known),
                                 absl::Milliseconds(limits::kRegistrationWaitMs));
}

absl::StatusOr<int> DeviceMap::OrdinalOf(int64_t global_id) const {
  absl::MutexLock lock(&mutex_);
  if (!AwaitIdsLocked()) {
    return absl::UnavailableError("worker has not yet registered with the resource manager");
  }
  for (const DeviceInfo& device : devices_) {
    if (device.global_id() == global_id) return device.local_ordinal();
  }
  return absl::NotFoundError(absl::StrCat("device ", global_id, " is not on this worker"));
}

absl::StatusOr<int64_t> DeviceMap::GlobalIdOf(int ordinal) const {
  absl::MutexLock lock(&mutex_);
  AwaitIdsLocked();
  for (const DeviceInfo& device : devices_) {
    if (device.local_ordinal() == ordinal) return device.global_id();
  }
  return absl::UnavailableError("worker has not yet registered with the resource manager");
}

}  // namespace switchyard::worker
