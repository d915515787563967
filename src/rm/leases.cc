#include "rm/leases.h"

#include <algorithm>
#include <functional>
#include <set>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/limits.h"

namespace switchyard::rm {
namespace {

bool Matches(const SliceShape& shape, const SliceStatus& slice) {
  int devices = 0;
  for (const HostStatus& host : slice.hosts()) {
    for (const DeviceInfo& device : host.devices()) {
      if (!KindMatches(shape, device.kind())) return false;
      ++devices;
    }
  }
  return devices > 0 && (shape.devices == 0 || shape.devices == devices);
}

}  // namespace

namespace {

// "TENANT:VALUE,..." into a map; `parse` reads and checks one value. An error names
// `flag`, the offending part, and `expected`.
template <typename Value>
absl::StatusOr<std::map<std::string, Value>> ParseTenantValues(
    const std::string& text, absl::string_view flag, absl::string_view expected,
    const std::function<bool(absl::string_view, Value*)>& parse) {
  std::map<std::string, Value> values;
  if (text.empty()) return values;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> pieces = absl::StrSplit(part, absl::MaxSplits(':', 1));
    Value value{};
    if (pieces.size() != 2 || pieces[0].empty() || !parse(pieces[1], &value)) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": '", part, "' is not ", expected));
    }
    values[std::string(pieces[0])] = value;
  }
  return values;
}

}  // namespace

absl::StatusOr<std::map<std::string, double>> ParseTenantShares(const std::string& text) {
  return ParseTenantValues<double>(
      text, "--tenant_shares",
      "TENANT:SHARE with a share from 0.001 to 1000000 (e.g. alice:1,bob:2)",
      [](absl::string_view text, double* share) {
        return absl::SimpleAtod(text, share) && *share >= 1e-3 && *share <= 1e6;
      });
}

absl::StatusOr<std::map<std::string, int>> ParseTenantPriorities(const std::string& text) {
  return ParseTenantValues<int>(
      text, "--tenant_priorities", "TENANT:PRIORITY with an integer priority (e.g. prod:10,dev:0)",
      [](absl::string_view text, int* priority) {
        return absl::SimpleAtoi(text, priority) && *priority >= -1000000 && *priority <= 1000000;
      });
}

bool Leases::CouldHold(const LeaseSpec& spec, const Fleet& fleet) {
  std::set<int> used;  // each shape needs its own slice
  for (const SliceShape& shape : spec.shapes) {
    bool found = false;
    for (const SliceStatus& slice : fleet.slices()) {
      if (!used.count(slice.slice_index()) && Matches(shape, slice)) {
        used.insert(slice.slice_index());
        found = true;
        break;
      }
    }
    if (!found) return false;
  }
  return true;
}

namespace {

absl::Status NoRoom(const LeaseSpec& spec, const Fleet& fleet, absl::string_view when) {
  std::vector<std::string> wanted;
  for (const SliceShape& s : spec.shapes) wanted.push_back(SliceShapeString(s));
  return absl::FailedPreconditionError(absl::StrCat(
      "the fleet has no room for ", absl::StrJoin(wanted, ","), " even when empty", when,
      ": it has ", fleet.slices_size(), " slices, and not enough of them match (a slice ",
      "matches when all its devices are of the kind and it has exactly that many)"));
}

}  // namespace

absl::StatusOr<uint64_t> Leases::Request(LeaseSpec spec, const Fleet& fleet, absl::Time now) {
  if (spec.shapes.empty()) return absl::InvalidArgumentError("a lease must ask for a slice");
  if (static_cast<int64_t>(spec.shapes.size()) > limits::kLeaseSlicesMax ||
      static_cast<int64_t>(spec.preferred.size()) > limits::kLeaseSlicesMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("a lease may ask for at most ", limits::kLeaseSlicesMax, " slices"));
  }
  if (static_cast<int64_t>(spec.owner.size()) > limits::kNameBytesMax ||
      static_cast<int64_t>(spec.tenant.size()) > limits::kNameBytesMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("owner and tenant names are at most ", limits::kNameBytesMax, " bytes"));
  }
  if (spec.reclaim && spec.preferred.size() != spec.shapes.size()) {
    return absl::InvalidArgumentError("a reclaim names one slice for each shape");
  }
  if (!spec.reclaim && !CouldHold(spec, fleet)) return NoRoom(spec, fleet, "");
  if (spec.reclaim && spec.replaces != 0) {
    // The same session's lease from before the break, if its stream has not ended yet:
    // its slices pass to the reclaim.
    auto old = leases_.find(spec.replaces);
    if (old != leases_.end() && old->second.spec.owner == spec.owner) Release(spec.replaces);
  }
  const uint64_t id = next_id_++;
  Lease& lease = leases_[id];
  lease.spec = std::move(spec);
  lease.arrival = id;
  lease.since = now;
  ++version_;
  return id;
}

void Leases::Release(uint64_t id) {
  auto it = leases_.find(id);
  if (it == leases_.end()) return;
  for (int slice : it->second.slices) {
    auto holder = holders_.find(slice);
    if (holder != holders_.end() && holder->second == id) holders_.erase(holder);
  }
  leases_.erase(it);
  ++version_;
}

void Leases::End(uint64_t id, absl::Status status) {
  Lease& lease = leases_.at(id);
  for (int slice : lease.slices) {
    auto holder = holders_.find(slice);
    if (holder != holders_.end() && holder->second == id) holders_.erase(holder);
  }
  lease.slices.clear();
  lease.ended = std::move(status);
  ++version_;
}

double Leases::Share(const std::string& tenant) const {
  auto it = options_.tenant_shares.find(tenant);
  return it == options_.tenant_shares.end() ? 1.0 : it->second;
}

int Leases::Priority(const std::string& tenant) const {
  auto it = options_.tenant_priorities.find(tenant);
  return it == options_.tenant_priorities.end() ? 0 : it->second;
}

std::vector<uint64_t> Leases::Order() const {
  std::map<std::string, int> held;  // slices by tenant
  std::vector<uint64_t> queued;
  std::vector<uint64_t> order;
  for (const auto& [id, lease] : leases_) {
    if (!Waiting(lease)) {
      held[lease.spec.tenant] += static_cast<int>(lease.slices.size());
    } else if (lease.spec.reclaim) {
      order.push_back(id);  // before everything else
    } else {
      queued.push_back(id);  // ids grow with arrival
    }
  }
  // Each step takes the earliest request of the highest priority and, with shares, of
  // the tenant furthest below its share, and counts what it would hold once placed.
  const bool shares = !options_.tenant_shares.empty();
  while (!queued.empty()) {
    auto best = queued.begin();
    for (auto it = queued.begin(); it != queued.end(); ++it) {
      const Lease& a = leases_.at(*it);
      const Lease& b = leases_.at(*best);
      const int priority_a = -Priority(a.spec.tenant);
      const int priority_b = -Priority(b.spec.tenant);
      const double usage_a = shares ? held[a.spec.tenant] / Share(a.spec.tenant) : 0;
      const double usage_b = shares ? held[b.spec.tenant] / Share(b.spec.tenant) : 0;
      if (std::tie(priority_a, usage_a, a.arrival) < std::tie(priority_b, usage_b, b.arrival)) {
        best = it;
      }
    }
    const Lease& chosen = leases_.at(*best);
    held[chosen.spec.tenant] += static_cast<int>(chosen.spec.shapes.size());
    order.push_back(*best);
    queued.erase(best);
  }
  return order;
}

std::optional<std::vector<int>> Leases::Fit(const LeaseSpec& spec, const Fleet& fleet,
                                            const std::set<uint64_t>& also_free) const {
  auto free = [&](int slice) {
    auto holder = holders_.find(slice);
    return holder == holders_.end() || also_free.count(holder->second) > 0;
  };
  if (spec.reclaim) {  // exactly its slices, distinct and listed, healthy or rejoining
    std::set<int> listed;
    for (const SliceStatus& slice : fleet.slices()) listed.insert(slice.slice_index());
    const std::set<int> distinct(spec.preferred.begin(), spec.preferred.end());
    if (distinct.size() != spec.preferred.size()) return std::nullopt;
    for (int slice : spec.preferred) {
      if (!listed.count(slice) || !free(slice)) return std::nullopt;
    }
    return spec.preferred;
  }
  const std::set<int> preferred(spec.preferred.begin(), spec.preferred.end());
  std::vector<const SliceStatus*> candidates;  // preferred slices first, then by index
  for (const SliceStatus& slice : fleet.slices()) {
    if (slice.healthy() && free(slice.slice_index())) candidates.push_back(&slice);
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](const SliceStatus* a, const SliceStatus* b) {
                     return std::make_tuple(!preferred.count(a->slice_index()), a->slice_index()) <
                            std::make_tuple(!preferred.count(b->slice_index()), b->slice_index());
                   });
  std::vector<int> slices;
  std::set<int> taken;
  for (const SliceShape& shape : spec.shapes) {
    bool found = false;
    for (const SliceStatus* slice : candidates) {
      if (!taken.count(slice->slice_index()) && Matches(shape, *slice)) {
        taken.insert(slice->slice_index());
        slices.push_back(slice->slice_index());
        found = true;
        break;
      }
    }
    if (!found) return std::nullopt;
  }
  return slices;
}

std::optional<std::set<uint64_t>> Leases::Victims(
    uint64_t id, const Fleet& fleet, const std::function<bool(const Lease&)>& candidate) const {
  std::vector<uint64_t> lower;  // lowest priority, latest placed first
  for (const auto& [other, lease] : leases_) {
    if (!lease.slices.empty() && candidate(lease)) lower.push_back(other);
  }
  std::sort(lower.begin(), lower.end(), [&](uint64_t a, uint64_t b) {
    const Lease& x = leases_.at(a);
    const Lease& y = leases_.at(b);
    return std::make_tuple(Priority(x.spec.tenant), -absl::ToUnixNanos(x.since)) <
           std::make_tuple(Priority(y.spec.tenant), -absl::ToUnixNanos(y.since));
  });
  std::set<uint64_t> victims;
  for (uint64_t other : lower) {
    victims.insert(other);
    std::optional<std::vector<int>> slices = Fit(leases_.at(id).spec, fleet, victims);
    if (!slices.has_value()) continue;
    std::set<uint64_t> needed;  // only those it would take slices from
    for (int slice : *slices) {
      auto holder = holders_.find(slice);
      if (holder != holders_.end()) needed.insert(holder->second);
    }
    return needed;
  }
  return std::nullopt;
}

std::vector<uint64_t> Leases::Place(const Fleet& fleet, absl::Time now) {
  std::vector<uint64_t> placed;
  for (uint64_t id : Order()) {
    Lease& lease = leases_.at(id);
    std::optional<std::vector<int>> slices = Fit(lease.spec, fleet);
    if (!slices.has_value() && lease.spec.reclaim) {
      End(id, absl::AbortedError(absl::StrCat(
                  "the session's slices ", absl::StrJoin(lease.spec.preferred, ","),
                  " went to another session while its stream to the resource manager was "
                  "broken")));
      continue;
    }
    if (!slices.has_value() && !CouldHold(lease.spec, fleet)) {
      End(id, NoRoom(lease.spec, fleet, " (since it asked, hosts left the fleet)"));
      continue;
    }
    if (!slices.has_value()) {
      const int priority = Priority(lease.spec.tenant);
      std::optional<std::set<uint64_t>> victims = Victims(
          id, fleet, [&](const Lease& other) { return Priority(other.spec.tenant) < priority; });
      if (!victims.has_value()) break;  // the head waits; nothing overtakes it
      for (uint64_t victim : *victims) {
        End(victim,
            absl::AbortedError(absl::StrCat(
                "preempted by a session of tenant '", lease.spec.tenant, "' (priority ", priority,
                " > ", Priority(leases_.at(victim).spec.tenant), ", --tenant_priorities)")));
      }
      slices = Fit(lease.spec, fleet);
      if (!slices.has_value()) break;
    }
    lease.slices = *std::move(slices);
    lease.since = now;
    for (int slice : lease.slices) holders_[slice] = id;
    placed.push_back(id);
    ++version_;
  }
  return placed;
}

std::vector<uint64_t> Leases::Sweep(const Fleet& fleet, absl::Time now) {
  std::vector<uint64_t> taken;
  if (options_.max_hold <= absl::ZeroDuration()) return taken;
  const std::vector<uint64_t> order = Order();
  if (order.empty()) return taken;
  const uint64_t head = order.front();
  const int priority = Priority(leases_.at(head).spec.tenant);
  std::optional<std::set<uint64_t>> victims = Victims(head, fleet, [&](const Lease& other) {
    return now - other.since >= options_.max_hold && Priority(other.spec.tenant) <= priority;
  });
  if (!victims.has_value()) return taken;
  for (uint64_t id : *victims) {
    const Lease& lease = leases_.at(id);
    End(id, absl::AbortedError(absl::StrCat(
                "the lease on slices ", absl::StrJoin(lease.slices, ","), " was held for ",
                absl::FormatDuration(absl::Trunc(now - lease.since, absl::Seconds(1))),
                " while others waited; the pool's limit is ",
                absl::FormatDuration(options_.max_hold), " (--lease_max_hold)")));
    taken.push_back(id);
  }
  return taken;
}

std::optional<Leases::State> Leases::Get(uint64_t id) const {
  auto it = leases_.find(id);
  if (it == leases_.end()) return std::nullopt;
  State state;
  state.slices = it->second.slices;
  state.ended = it->second.ended;
  if (Waiting(it->second)) {
    const std::vector<uint64_t> order = Order();
    state.queue_position =
        static_cast<int>(std::find(order.begin(), order.end(), id) - order.begin()) + 1;
  }
  return state;
}

LeaseTable Leases::Snapshot(absl::Time now) const {
  LeaseTable table;
  auto fill = [&](uint64_t id, const Lease& lease, LeaseInfo* info) {
    info->set_lease_id(id);
    info->set_owner(lease.spec.owner);
    info->set_tenant(lease.spec.tenant);
    for (const SliceShape& shape : lease.spec.shapes) {
      LeaseShape* wire = info->add_slices();
      wire->set_kind(shape.kind);
      wire->set_devices(shape.devices);
    }
    for (int slice : lease.slices) info->add_slice_indices(slice);
    info->set_age_ms(absl::ToInt64Milliseconds(now - lease.since));
  };
  for (const auto& [id, lease] : leases_) {
    if (!lease.slices.empty()) fill(id, lease, table.add_held());
  }
  for (uint64_t id : Order()) fill(id, leases_.at(id), table.add_queued());
  return table;
}

}  // namespace switchyard::rm
