#include "worker/gang_order.h"

#include <algorithm>

namespace switchyard::worker {

bool GangOrder::MayGo(uint64_t owner, uint64_t gang) const {
  return gang == 0 || gang <= Next(owner);
}

void GangOrder::Passed(uint64_t owner, uint64_t gang) {
  if (gang == 0) return;
  uint64_t& passed = passed_[owner];
  passed = std::max(passed, gang);
}

uint64_t GangOrder::Next(uint64_t owner) const {
  auto it = passed_.find(owner);
  return it == passed_.end() ? 1 : it->second + 1;
}

}  // namespace switchyard::worker
