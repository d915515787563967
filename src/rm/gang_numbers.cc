#include "rm/gang_numbers.h"

#include <algorithm>

#include "common/limits.h"

namespace switchyard::rm {

std::vector<uint64_t> GangNumbers::Number(uint64_t proxy, uint64_t session,
                                          absl::Span<const HostKey> hosts) {
  std::vector<uint64_t> numbers;
  numbers.reserve(hosts.size());
  for (const HostKey& key : hosts) {
    Host& host = hosts_[key];
    const uint64_t number = host.next++;
    host.given[number] = Given{proxy, session, false};
    // A host that never reports: its oldest numbers go (and count as void if asked).
    if (host.given.size() > max_per_host_) Forget(host, host.given.begin()->first);
    numbers.push_back(number);
  }
  return numbers;
}

int32_t GangNumbers::NextLaunchId() {
  launches_ = launches_ % limits::kRmLaunchIdsMax + 1;
  return static_cast<int32_t>(launches_);
}

void GangNumbers::ProxyGone(uint64_t proxy) {
  for (auto& [key, host] : hosts_) {
    for (auto& [number, given] : host.given) {
      if (given.proxy == proxy) given.void_ = true;
    }
  }
}

void GangNumbers::SessionEnded(uint64_t proxy, uint64_t session) {
  for (auto& [key, host] : hosts_) {
    for (auto& [number, given] : host.given) {
      if (given.proxy == proxy && given.session == session) given.void_ = true;
    }
  }
}

bool GangNumbers::Void(const HostKey& key, uint64_t number, uint64_t proxy, uint64_t session) {
  auto it = hosts_.find(key);
  if (it == hosts_.end()) return false;
  auto given = it->second.given.find(number);
  if (given == it->second.given.end() || given->second.proxy != proxy ||
      given->second.session != session) {
    return false;
  }
  given->second.void_ = true;
  return true;
}

uint64_t GangNumbers::Restarted(const HostKey& key) {
  Host& host = hosts_[key];
  Forget(host, host.next - 1);
  return host.next;
}

void GangNumbers::Passed(const HostKey& key, uint64_t passed) {
  auto it = hosts_.find(key);
  if (it == hosts_.end()) return;
  // Never past what was given: a report from a host of another RM process is not news.
  Forget(it->second, std::min(passed, it->second.next - 1));
}

void GangNumbers::Forget(Host& host, uint64_t upto) {
  if (upto <= host.forgotten) return;
  host.forgotten = upto;
  host.given.erase(host.given.begin(), host.given.upper_bound(upto));
}

std::vector<uint64_t> GangNumbers::Voids(const HostKey& key, uint64_t first, uint64_t last) const {
  std::vector<uint64_t> voids;
  auto it = hosts_.find(key);
  if (it == hosts_.end() || first > last) return voids;
  const Host& host = it->second;
  // Bounded work whatever is asked (RmService refuses more than this).
  const uint64_t most = limits::kGangVoidsQueryMax - 1;
  last = std::min({last, host.next - 1, first > UINT64_MAX - most ? UINT64_MAX : first + most});
  for (uint64_t number = first; number <= last && number <= host.forgotten; ++number) {
    voids.push_back(number);
  }
  for (auto given = host.given.lower_bound(std::max(first, host.forgotten + 1));
       given != host.given.end() && given->first <= last; ++given) {
    if (given->second.void_) voids.push_back(given->first);
  }
  return voids;
}

size_t GangNumbers::kept() const {
  size_t kept = 0;
  for (const auto& [key, host] : hosts_) kept += host.given.size();
  return kept;
}

}  // namespace switchyard::rm
