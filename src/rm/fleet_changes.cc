#include "rm/fleet_changes.h"

#include "google/protobuf/util/message_differencer.h"

namespace switchyard::rm {
namespace {

SliceStatus WithoutFigures(const SliceStatus& slice) {
  SliceStatus out = slice;
  for (HostStatus& host : *out.mutable_hosts()) {
    host.clear_last_heartbeat_age_ms();
    host.clear_last_restart_age_ms();
    host.clear_resident_bytes();
    host.clear_buffer_bytes();
  }
  return out;
}

}  // namespace

Fleet FleetChanges::Next(const Fleet& now) {
  Fleet out;
  out.set_version(now.version());
  *out.mutable_tenant_shares() = now.tenant_shares();
  for (const SliceStatus& slice : now.slices()) {
    SliceStatus plain = WithoutFigures(slice);
    auto it = sent_.find(slice.slice_index());
    if (it != sent_.end() &&
        google::protobuf::util::MessageDifferencer::Equals(it->second, plain)) {
      continue;
    }
    sent_[slice.slice_index()] = std::move(plain);
    *out.add_slices() = slice;
  }
  return out;
}

}  // namespace switchyard::rm
