#pragma once

// IFRT shardings as the client sends them (SingleDevice, Hlo, ConcreteEven), decoded
// into which part of the array each device holds; and the shardings we send back.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/host_array.h"
#include "ifrt/ifrt_types.pb.h"
#include "xla/xla_data.pb.h"

namespace switchyard::proxy {

struct Sharding {
  std::vector<int64_t> devices;  // the device list, global ids
  std::optional<std::string> memory_kind;
  // How the array is split over `devices`; tile entries index into `devices`.
  switchyard::xla::OpSharding op;
  bool single_device = false;  // sent as a SingleDeviceSharding

  bool IsFullyReplicated() const;
};

// INVALID_ARGUMENT for malformed payloads; UNIMPLEMENTED for sharding kinds we do not
// serve, naming them.
absl::StatusOr<Sharding> ParseSharding(const ::xla::ifrt::ShardingProto& proto);

// What each device of `sharding.devices` holds of an array of `shape`, in device-list
// order; UNIMPLEMENTED for uneven tilings. A device that holds nothing gets no entry
// and `holds[i]` is false.
struct ShardLayout {
  std::vector<IndexDomain> domains;
  std::vector<bool> holds;
};
absl::StatusOr<ShardLayout> LayoutShards(const Sharding& sharding,
                                         const std::vector<int64_t>& shape);

// The same sharding in XLA's tile form: a Shardy named sharding (`named_sharding`)
// becomes REPLICATED, MAXIMAL, OTHER or TUPLE. UNIMPLEMENTED for sub-axes and
// unreduced axes.
absl::StatusOr<switchyard::xla::OpSharding> ToTileForm(const switchyard::xla::OpSharding& op);

// The global shape of an array whose shards (one per device) have `shard_shape`.
std::vector<int64_t> GlobalShape(const switchyard::xla::OpSharding& op,
                                 const std::vector<int64_t>& shard_shape);

Sharding SingleDevice(int64_t device, std::optional<std::string> memory_kind = std::nullopt);
Sharding WithDevices(const Sharding& sharding, std::vector<int64_t> devices);
::xla::ifrt::ShardingProto ToProto(const Sharding& sharding);

}  // namespace switchyard::proxy
