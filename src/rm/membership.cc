#include "rm/membership.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/call_metadata.h"
#include "common/limits.h"
#include "common/slice_shape.h"

namespace switchyard::rm {
namespace {

absl::Status CheckName(const std::string& value, absl::string_view what) {
  if (static_cast<int64_t>(value.size()) > limits::kNameBytesMax) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has ", value.size(), " bytes; the limit is ", limits::kNameBytesMax));
  }
  return absl::OkStatus();
}

}  // namespace

void Membership::Observe(absl::Time now) {
  const absl::Duration gap = now - observed_;
  if (observed_ != absl::InfinitePast() && options_.stall_after > absl::ZeroDuration() &&
      gap > options_.stall_after) {
    for (auto& [key, host] : hosts_) {
      if (host.alive) host.last_heartbeat = std::min(now, host.last_heartbeat + gap);
    }
  }
  observed_ = std::max(observed_, now);
}

bool Membership::Healthy(const Host& host, absl::Time now) const {
  return host.alive &&
         now - host.last_heartbeat <= options_.heartbeat_timeout + options_.confirm_window;
}

absl::Status Membership::CheckRequest(const RegisterWorkerRequest& request) const {
  if (request.address().empty()) {
    return absl::InvalidArgumentError("registration without a worker address");
  }
  for (auto [value, what] :
       {std::pair{&request.address(), "address"}, std::pair{&request.hostname(), "hostname"},
        std::pair{&request.boot_id(), "boot_id"}}) {
    absl::Status status = CheckName(*value, what);
    if (!status.ok()) return status;
  }
  if (!IsMetadataValue(request.boot_id())) {
    return absl::InvalidArgumentError("boot_id must be printable ASCII");
  }
  if (request.slice_index() < 0 || request.slice_index() >= limits::kSlicesMax ||
      request.host_index() < 0 || request.host_index() >= limits::kHostsPerSliceMax) {
    return absl::InvalidArgumentError(absl::StrCat(
        "slice_index (", request.slice_index(), ") must be in [0, ", limits::kSlicesMax,
        ") and host_index (", request.host_index(), ") in [0, ", limits::kHostsPerSliceMax, ")"));
  }
  if (request.devices().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker ", request.address(), " registered without devices"));
  }
  if (request.devices_size() > limits::kDevicesPerHostMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker ", request.address(), " registered ", request.devices_size(),
                     " devices; the limit is ", limits::kDevicesPerHostMax));
  }
  std::set<int> ordinals;
  for (const DeviceInfo& device : request.devices()) {
    if (device.local_ordinal() < 0 || device.local_ordinal() >= limits::kDevicesPerHostMax ||
        !ordinals.insert(device.local_ordinal()).second) {
      return absl::InvalidArgumentError(absl::StrCat("worker ", request.address(),
                                                     " sent a bad or repeated local ordinal ",
                                                     device.local_ordinal()));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseInstanceType(const std::string& instance_type, ExpectedFleet* fleet) {
  fleet->kind.clear();
  fleet->devices_per_slice = 0;
  if (instance_type.empty()) return absl::OkStatus();
  absl::StatusOr<SliceShape> shape = ParseSliceShape(instance_type, "--instance_type");
  if (!shape.ok()) return shape.status();
  fleet->kind = shape->kind;
  fleet->devices_per_slice = shape->devices;
  return absl::OkStatus();
}

absl::Status Membership::CheckExpected(const RegisterWorkerRequest& request) const {
  const ExpectedFleet& expected = options_.expected;
  // Pathways' wording, which its users' tooling searches for, then the reason.
  const std::string refused = absl::StrCat(
      "The newly added instance does not match with the expected instances: worker ",
      request.address(), " (slice ", request.slice_index(), " host ", request.host_index(), ") ");
  if (expected.slices > 0 && request.slice_index() >= expected.slices) {
    return absl::FailedPreconditionError(absl::StrCat(
        refused, "is outside the fleet's ", expected.slices, " slices (--instance_count)"));
  }
  if (!expected.kind.empty()) {
    for (const DeviceInfo& device : request.devices()) {
      if (!KindMatches(SliceShape{expected.kind, 0}, device.kind())) {
        return absl::FailedPreconditionError(absl::StrCat(refused, "has '", device.kind(),
                                                          "' devices, not '", expected.kind,
                                                          "' (--instance_type)"));
      }
    }
  }
  if (expected.devices_per_slice > 0) {
    int64_t devices = request.devices_size();
    for (const auto& [key, host] : hosts_) {
      if (key.first == request.slice_index() && key.second != request.host_index()) {
        devices += host.request.devices_size();
      }
    }
    if (devices > expected.devices_per_slice) {
      return absl::FailedPreconditionError(absl::StrCat(refused, "would give its slice ", devices,
                                                        " devices; --instance_type says ",
                                                        expected.devices_per_slice));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RegisterWorkerResponse> Membership::Register(const RegisterWorkerRequest& request,
                                                            uint64_t incarnation, absl::Time now) {
  Observe(now);
  absl::Status valid = CheckRequest(request);
  if (!valid.ok()) return valid;
  valid = CheckExpected(request);
  if (!valid.ok()) return valid;
  const HostKey key{request.slice_index(), request.host_index()};
  auto existing = hosts_.find(key);
  if (existing != hosts_.end() && Healthy(existing->second, now) &&
      existing->second.request.address() != request.address()) {
    // Same address means the old process is gone (servers do not share ports).
    const RegisterWorkerRequest& holder = existing->second.request;
    return absl::AlreadyExistsError(absl::StrCat(
        "slice ", key.first, " host ", key.second, " is already held by the live worker at ",
        holder.address(), " (pid ", holder.pid(), " on ", holder.hostname(),
        "); stop it, or start this worker with another --slice_index/--host_index"));
  }
  if (existing == hosts_.end() && static_cast<int64_t>(hosts_.size()) >= limits::kHostsMax) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the fleet already has ", hosts_.size(), " hosts, the limit"));
  }
  int64_t new_ids = 0;
  for (const DeviceInfo& device : request.devices()) {
    new_ids += device_ids_.count({key.first, key.second, device.local_ordinal()}) == 0;
  }
  if (next_device_id_ + new_ids > limits::kDeviceIdsMax) {
    return absl::ResourceExhaustedError("the fleet has used up its global device ids");
  }
  // A live entry elsewhere with this address belonged to a process that is gone.
  for (auto& [other_key, other] : hosts_) {
    if (other_key != key && other.alive && other.request.address() == request.address()) {
      other.alive = false;
      other.down_since = now;
    }
  }

  Host& host = hosts_[key];
  if (!host.request.boot_id().empty() && host.request.boot_id() != request.boot_id()) {
    ++host.restarts;
    host.last_restart = now;
  }
  host.request = request;
  if (host.incarnation != 0) by_incarnation_.erase(host.incarnation);
  host.incarnation = incarnation;
  by_incarnation_[incarnation] = key;
  host.last_heartbeat = now;
  host.alive = true;
  host.rejoining = false;
  ++host.registrations;
  ++version_;

  RegisterWorkerResponse response;
  response.set_incarnation(incarnation);
  response.set_heartbeat_period_ms(0);  // filled by the service
  for (DeviceInfo& device : *host.request.mutable_devices()) {
    auto [it, inserted] =
        device_ids_.try_emplace({key.first, key.second, device.local_ordinal()}, next_device_id_);
    if (inserted) ++next_device_id_;
    device.set_global_id(it->second);
    device.set_slice_index(key.first);
    device.set_host_index(key.second);
    *response.add_devices() = device;
  }
  return response;
}

absl::Status Membership::Heartbeat(uint64_t incarnation, absl::Time now,
                                   const HeartbeatRequest& report) {
  Observe(now);
  // By index, not by a scan: every host heartbeats every period.
  auto found = by_incarnation_.find(incarnation);
  auto it = found == by_incarnation_.end() ? hosts_.end() : hosts_.find(found->second);
  if (it != hosts_.end() && it->second.incarnation == incarnation && !it->second.rejoining) {
    const HostKey& key = it->first;
    Host& host = it->second;
    if (!Healthy(host, now)) {
      if (host.alive) {
        host.alive = false;
        host.down_since = now;
        ++version_;
      }
      return absl::NotFoundError(absl::StrCat("incarnation ", incarnation, " of slice ", key.first,
                                              " host ", key.second,
                                              " was declared dead; register again"));
    }
    host.last_heartbeat = now;
    host.resident_bytes = std::max<int64_t>(report.resident_bytes(), 0);
    host.buffer_bytes = std::max<int64_t>(report.buffer_bytes(), 0);
    return absl::OkStatus();
  }
  return absl::NotFoundError(
      absl::StrCat("unknown worker incarnation ", incarnation, "; register again"));
}

std::optional<HostStatus> Membership::Holder(int slice_index, int host_index, absl::Time now) {
  Observe(now);
  auto it = hosts_.find({slice_index, host_index});
  if (it == hosts_.end() || !Healthy(it->second, now)) return std::nullopt;
  return Status(it->first, it->second, now);
}

void Membership::Evict(int slice_index, int host_index, uint64_t incarnation, absl::Time now) {
  Observe(now);
  auto it = hosts_.find({slice_index, host_index});
  if (it == hosts_.end() || !it->second.alive || it->second.incarnation != incarnation) return;
  it->second.alive = false;
  it->second.down_since = now;
  ++version_;
}

std::vector<HostStatus> Membership::Overdue(absl::Time now) {
  Observe(now);
  std::vector<HostStatus> overdue;
  for (const auto& [key, host] : hosts_) {
    if (Healthy(host, now) && now - host.last_heartbeat > options_.heartbeat_timeout) {
      overdue.push_back(Status(key, host, now));
    }
  }
  return overdue;
}

std::vector<HostStatus> Membership::Sweep(absl::Time now) {
  Observe(now);
  std::vector<HostStatus> died;
  for (auto it = hosts_.begin(); it != hosts_.end();) {
    Host& host = it->second;
    if (host.alive && !Healthy(host, now)) {
      host.alive = false;
      host.down_since = now;
      ++version_;
      died.push_back(Status(it->first, host, now));
    } else if (host.rejoining && now - host.down_since > options_.rejoin_grace) {
      host.rejoining = false;  // it did not come back in time: down
      ++version_;
      died.push_back(Status(it->first, host, now));
    } else if (!host.alive && !host.rejoining && now - host.down_since > options_.forget_after) {
      by_incarnation_.erase(host.incarnation);
      it = hosts_.erase(it);
      ++version_;
      continue;
    }
    ++it;
  }
  return died;
}

HostStatus Membership::Status(const HostKey& key, const Host& host, absl::Time now) const {
  HostStatus status;
  status.set_address(host.request.address());
  status.set_slice_index(key.first);
  status.set_host_index(key.second);
  status.set_healthy(Healthy(host, now));
  status.set_last_heartbeat_age_ms(absl::ToInt64Milliseconds(now - host.last_heartbeat));
  *status.mutable_plugin() = host.request.plugin();
  *status.mutable_devices() = host.request.devices();
  status.set_hostname(host.request.hostname());
  status.set_pid(host.request.pid());
  status.set_incarnation(host.incarnation);
  status.set_registrations(host.registrations);
  status.set_restarts(host.restarts);
  status.set_last_restart_age_ms(
      host.restarts == 0 ? -1 : absl::ToInt64Milliseconds(now - host.last_restart));
  status.set_boot_id(host.request.boot_id());
  status.set_resident_bytes(host.resident_bytes);
  status.set_buffer_bytes(host.buffer_bytes);
  status.set_rejoining(host.rejoining);
  status.set_protocol_version(host.request.protocol_version());
  return status;
}

std::optional<std::pair<int, int>> Membership::HostOf(uint64_t incarnation) const {
  auto it = by_incarnation_.find(incarnation);
  if (it == by_incarnation_.end()) return std::nullopt;
  return it->second;
}

Fleet Membership::Snapshot(absl::Time now) {
  Observe(now);
  Fleet fleet;
  fleet.set_version(version_);
  SliceStatus* slice = nullptr;
  for (const auto& [key, host] : hosts_) {  // ordered by (slice, host)
    if (slice == nullptr || slice->slice_index() != key.first) {
      slice = fleet.add_slices();
      slice->set_slice_index(key.first);
      slice->set_healthy(true);
    }
    HostStatus* status = slice->add_hosts();
    *status = Status(key, host, now);
    if (!status->healthy()) slice->set_healthy(false);
  }
  return fleet;
}

RmState Membership::Export() const {
  RmState state;
  for (const auto& [key, id] : device_ids_) {
    RmState::DeviceId* entry = state.add_device_ids();
    entry->set_slice_index(std::get<0>(key));
    entry->set_host_index(std::get<1>(key));
    entry->set_local_ordinal(std::get<2>(key));
    entry->set_global_id(id);
  }
  state.set_next_device_id(next_device_id_);
  for (const auto& [key, host] : hosts_) *state.add_hosts() = host.request;
  return state;
}

absl::Status Membership::Restore(const RmState& state, absl::Time now) {
  if (!hosts_.empty() || !device_ids_.empty()) {
    return absl::FailedPreconditionError("restoring into a membership that is in use");
  }
  std::map<std::tuple<int, int, int>, int64_t> ids;
  std::set<int64_t> used;
  for (const RmState::DeviceId& entry : state.device_ids()) {
    if (entry.global_id() < 0 || entry.global_id() >= state.next_device_id() ||
        !used.insert(entry.global_id()).second ||
        !ids.try_emplace({entry.slice_index(), entry.host_index(), entry.local_ordinal()},
                         entry.global_id())
             .second) {
      return absl::InvalidArgumentError(absl::StrCat("the RM state gives device id ",
                                                     entry.global_id(), " twice or out of range"));
    }
  }
  std::map<HostKey, Host> hosts;
  for (const RegisterWorkerRequest& request : state.hosts()) {
    absl::Status valid = CheckRequest(request);
    if (!valid.ok()) return valid;
    Host host;
    host.request = request;
    host.rejoining = true;
    host.down_since = now;
    host.last_heartbeat = now;
    host.registrations = 0;
    hosts[{request.slice_index(), request.host_index()}] = std::move(host);
  }
  device_ids_ = std::move(ids);
  next_device_id_ = state.next_device_id();
  hosts_ = std::move(hosts);
  ++version_;
  return absl::OkStatus();
}

}  // namespace switchyard::rm
