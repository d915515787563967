#include "worker/owner_leases.h"

namespace switchyard::worker {

void OwnerLeases::Opened(uint64_t owner, absl::Time now) { ++leases_[owner].streams; }

void OwnerLeases::Closed(uint64_t owner, absl::Time now) {
  auto it = leases_.find(owner);
  if (it == leases_.end() || it->second.streams == 0) return;
  if (--it->second.streams == 0) it->second.idle_since = now;
}

void OwnerLeases::Touched(uint64_t owner, absl::Time now) {
  auto [it, inserted] = leases_.try_emplace(owner);
  if (it->second.streams == 0) it->second.idle_since = now;
}

std::vector<uint64_t> OwnerLeases::Expire(absl::Time now) {
  std::vector<uint64_t> expired;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.streams == 0 && now - it->second.idle_since > grace_) {
      expired.push_back(it->first);
      leases_.erase(it++);
    } else {
      ++it;
    }
  }
  return expired;
}

}  // namespace switchyard::worker
