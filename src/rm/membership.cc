#include "rm/membership.h"

#include <set>

#include "absl/strings/str_cat.h"

namespace switchyard::rm {

bool Membership::Healthy(const Host& host, absl::Time now) const {
  return host.alive && now - host.last_heartbeat <= heartbeat_timeout_;
}

int64_t Membership::DeviceId(int slice, int host, int ordinal) {
  auto [it, inserted] = device_ids_.try_emplace({slice, host, ordinal}, next_device_id_);
  if (inserted) ++next_device_id_;
  return it->second;
}

absl::StatusOr<RegisterWorkerResponse> Membership::Register(const RegisterWorkerRequest& request,
                                                            uint64_t incarnation,
                                                            absl::Time now) {
  if (request.address().empty()) {
    return absl::InvalidArgumentError("registration without a worker address");
  }
  if (request.slice_index() < 0 || request.host_index() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("slice_index (", request.slice_index(),
                                                   ") and host_index (", request.host_index(),
                                                   ") must be non-negative"));
  }
  if (request.devices().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker ", request.address(), " registered without devices"));
  }
  std::set<int> ordinals;
  for (const DeviceInfo& device : request.devices()) {
    if (device.local_ordinal() < 0 || !ordinals.insert(device.local_ordinal()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "worker ", request.address(), " sent a bad or repeated local ordinal ",
          device.local_ordinal()));
    }
  }
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
  // A live entry elsewhere with this address belonged to a process that is gone.
  for (auto& [other_key, other] : hosts_) {
    if (other_key != key && other.alive && other.request.address() == request.address()) {
      other.alive = false;
    }
  }

  Host& host = hosts_[key];
  host.request = request;
  host.incarnation = incarnation;
  host.last_heartbeat = now;
  host.alive = true;
  ++host.registrations;

  RegisterWorkerResponse response;
  response.set_incarnation(incarnation);
  response.set_heartbeat_period_ms(0);  // filled by the service
  for (DeviceInfo& device : *host.request.mutable_devices()) {
    device.set_global_id(DeviceId(key.first, key.second, device.local_ordinal()));
    device.set_slice_index(key.first);
    device.set_host_index(key.second);
    *response.add_devices() = device;
  }
  return response;
}

absl::Status Membership::Heartbeat(uint64_t incarnation, absl::Time now) {
  for (auto& [key, host] : hosts_) {
    if (host.incarnation != incarnation) continue;
    if (!Healthy(host, now)) {
      host.alive = false;
      return absl::NotFoundError(absl::StrCat("incarnation ", incarnation, " of slice ", key.first,
                                              " host ", key.second,
                                              " was declared dead; register again"));
    }
    host.last_heartbeat = now;
    return absl::OkStatus();
  }
  return absl::NotFoundError(
      absl::StrCat("unknown worker incarnation ", incarnation, "; register again"));
}

std::vector<HostStatus> Membership::Sweep(absl::Time now) {
  std::vector<HostStatus> died;
  for (auto& [key, host] : hosts_) {
    if (host.alive && !Healthy(host, now)) {
      host.alive = false;
      HostStatus status;
      status.set_address(host.request.address());
      status.set_slice_index(key.first);
      status.set_host_index(key.second);
      status.set_last_heartbeat_age_ms(absl::ToInt64Milliseconds(now - host.last_heartbeat));
      died.push_back(std::move(status));
    }
  }
  return died;
}

Fleet Membership::Snapshot(absl::Time now) const {
  Fleet fleet;
  SliceStatus* slice = nullptr;
  for (const auto& [key, host] : hosts_) {  // ordered by (slice, host)
    if (slice == nullptr || slice->slice_index() != key.first) {
      slice = fleet.add_slices();
      slice->set_slice_index(key.first);
      slice->set_healthy(true);
    }
    HostStatus* status = slice->add_hosts();
    status->set_address(host.request.address());
    status->set_slice_index(key.first);
    status->set_host_index(key.second);
    status->set_healthy(Healthy(host, now));
    status->set_last_heartbeat_age_ms(absl::ToInt64Milliseconds(now - host.last_heartbeat));
    *status->mutable_plugin() = host.request.plugin();
    *status->mutable_devices() = host.request.devices();
    status->set_hostname(host.request.hostname());
    status->set_pid(host.request.pid());
    status->set_incarnation(host.incarnation);
    status->set_registrations(host.registrations);
    if (!status->healthy()) slice->set_healthy(false);
  }
  return fleet;
}

}  // namespace switchyard::rm
