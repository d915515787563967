#include "worker/gang_order.h"

namespace switchyard::worker {
namespace {

// Moves `passed` over the numbers ahead that now follow it.
template <typename Owner>
void Advance(Owner& order) {
  while (!order.ahead.empty() && *order.ahead.begin() == order.passed + 1) {
    order.passed = *order.ahead.begin();
    order.ahead.erase(order.ahead.begin());
  }
}

}  // namespace

bool GangOrder::MayGo(uint64_t owner, uint64_t gang) const {
  return gang == 0 || gang == Next(owner);
}

bool GangOrder::Late(uint64_t owner, uint64_t gang) const {
  if (gang == 0) return false;
  auto it = owners_.find(owner);
  if (it == owners_.end()) return false;
  return gang <= it->second.passed || it->second.ahead.contains(gang);
}

void GangOrder::Passed(uint64_t owner, uint64_t gang) {
  if (gang == 0) return;
  Owner& order = owners_[owner];
  if (gang <= order.passed) return;
  order.ahead.insert(gang);
  Advance(order);
}

void GangOrder::PassThrough(uint64_t owner, uint64_t gang) {
  if (gang == 0) return;
  Owner& order = owners_[owner];
  if (gang <= order.passed) return;
  order.ahead.erase(order.ahead.begin(), order.ahead.upper_bound(gang));
  order.passed = gang;
  Advance(order);
}

uint64_t GangOrder::Next(uint64_t owner) const {
  auto it = owners_.find(owner);
  return it == owners_.end() ? 1 : it->second.passed + 1;
}

}  // namespace switchyard::worker
