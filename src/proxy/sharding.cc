#include "proxy/sharding.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/limits.h"
#include "common/status_macros.h"
#include "common/wire_numbers.h"
#include "common/wire_record.h"

namespace switchyard::proxy {
namespace {

using switchyard::xla::OpSharding;

constexpr char kSingleDevice[] = "xla::ifrt::SingleDeviceSharding";
constexpr char kHlo[] = "xla::ifrt::HloSharding";
constexpr char kConcreteEven[] = "xla::ifrt::ConcreteEvenSharding";

std::vector<int64_t> Devices(const ::xla::ifrt::DeviceListProto& list) {
  return {list.device_ids().begin(), list.device_ids().end()};
}

// The tile assignment as a flat list of device-list indices, row-major over
// `tile_assignment_dimensions` (explicit, or an iota reshaped and transposed).
absl::StatusOr<std::vector<int64_t>> TileAssignment(const OpSharding& op) {
  const std::vector<int64_t> dims(op.tile_assignment_dimensions().begin(),
                                  op.tile_assignment_dimensions().end());
  SY_ASSIGN_OR_RETURN(const int64_t tiles,
                      CheckedTiles(dims, limits::kDevicesMax, "tile assignment"));
  if (op.tile_assignment_devices_size() > 0) {
    if (op.tile_assignment_devices_size() != tiles) {
      return absl::InvalidArgumentError("tile assignment size does not match its dimensions");
    }
    return std::vector<int64_t>(op.tile_assignment_devices().begin(),
                                op.tile_assignment_devices().end());
  }
  std::vector<int64_t> reshape(op.iota_reshape_dims().begin(), op.iota_reshape_dims().end());
  if (reshape.empty()) reshape = {tiles};
  SY_ASSIGN_OR_RETURN(const int64_t iota,
                      CheckedTiles(reshape, limits::kDevicesMax, "iota tile assignment"));
  std::vector<int> perm(op.iota_transpose_perm().begin(), op.iota_transpose_perm().end());
  if (perm.empty()) {
    perm.resize(reshape.size());
    std::iota(perm.begin(), perm.end(), 0);
  }
  if (perm.size() != reshape.size()) return absl::InvalidArgumentError("bad iota tile assignment");
  // Element at transposed position q is iota at position p with p[perm[k]] = q[k].
  std::vector<int64_t> transposed(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) {
    if (perm[k] < 0 || perm[k] >= static_cast<int>(reshape.size())) {
      return absl::InvalidArgumentError("bad iota permutation");
    }
    transposed[k] = reshape[perm[k]];
  }
  if (iota != tiles) return absl::InvalidArgumentError("iota size does not match the tiles");
  std::vector<int64_t> source_strides(reshape.size());
  int64_t stride = 1;
  for (int k = static_cast<int>(reshape.size()) - 1; k >= 0; --k) {
    source_strides[k] = stride;
    stride *= reshape[k];
  }
  std::vector<int64_t> out;
  out.reserve(tiles);
  std::vector<int64_t> q(perm.size(), 0);
  for (int64_t n = 0; n < tiles; ++n) {
    int64_t value = 0;
    for (size_t k = 0; k < perm.size(); ++k) value += q[k] * source_strides[perm[k]];
    out.push_back(value);
    for (int k = static_cast<int>(q.size()) - 1; k >= 0; --k) {
      if (++q[k] < transposed[k]) break;
      q[k] = 0;
    }
  }
  return out;
}

absl::StatusOr<OpSharding> NamedToTileForm(const switchyard::xla::NamedShardingProto& named) {
  OpSharding out;
  if (named.tuple_shardings_size() > 0) {
    out.set_type(OpSharding::TUPLE);
    for (const auto& element : named.tuple_shardings()) {
      absl::StatusOr<OpSharding> converted = NamedToTileForm(element);
      if (!converted.ok()) return converted.status();
      *out.add_tuple_shardings() = *std::move(converted);
    }
    return out;
  }
  if (named.unreduced_axes_size() > 0) {
    return absl::UnimplementedError("shardings with unreduced axes are not supported");
  }
  const auto& mesh = named.mesh();
  std::vector<int64_t> sizes;
  for (const auto& axis : mesh.axes()) sizes.push_back(axis.size());
  SY_ASSIGN_OR_RETURN(const int64_t devices, CheckedTiles(sizes, limits::kDevicesMax, "mesh"));
  std::vector<int64_t> ids(mesh.device_ids().begin(), mesh.device_ids().end());
  if (sizes.empty()) {
    // An empty mesh with one device id is maximal on it; without ids it places
    // nothing, which XLA treats as replicated.
    out.set_type(ids.empty() ? OpSharding::REPLICATED : OpSharding::MAXIMAL);
    if (!ids.empty()) out.add_tile_assignment_devices(ids[0]);
    return out;
  }
  if (ids.empty()) {
    ids.resize(devices);
    std::iota(ids.begin(), ids.end(), 0);
  }
  if (static_cast<int64_t>(ids.size()) != devices) {
    return absl::InvalidArgumentError("mesh device ids do not match its axes");
  }
  std::vector<int> perm;  // mesh axes in tile order: sharding axes first, then the rest
  std::vector<int64_t> tile_dims;
  std::vector<bool> used(sizes.size(), false);
  for (const auto& dim : named.dim_shardings()) {
    int64_t tiles = 1;
    for (const auto& ref : dim.axes()) {
      if (ref.has_sub_axis_info())
        return absl::UnimplementedError("sub-axis shardings are not supported");
      const int64_t index = ref.mesh_axis_index();
      if (index < 0 || index >= static_cast<int64_t>(sizes.size()) || used[index]) {
        return absl::InvalidArgumentError("bad mesh axis reference in a named sharding");
      }
      used[index] = true;
      perm.push_back(static_cast<int>(index));
      tiles *= sizes[index];
    }
    tile_dims.push_back(tiles);
  }
  int64_t replicated = 1;
  for (size_t a = 0; a < sizes.size(); ++a) {
    if (!used[a]) {
      perm.push_back(static_cast<int>(a));
      replicated *= sizes[a];
    }
  }
  if (replicated == devices) {
    out.set_type(OpSharding::REPLICATED);
    return out;
  }
  out.set_type(OpSharding::OTHER);
  for (int64_t t : tile_dims) out.add_tile_assignment_dimensions(t);
  if (replicated > 1) {
    out.add_tile_assignment_dimensions(replicated);
    out.set_replicate_on_last_tile_dim(true);
  }
  // Device grid shaped like the mesh, transposed into tile order, flattened.
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1;
  for (int a = static_cast<int>(sizes.size()) - 1; a >= 0; --a) {
    strides[a] = stride;
    stride *= sizes[a];
  }
  std::vector<int64_t> position(perm.size(), 0);
  for (int64_t n = 0; n < devices; ++n) {
    int64_t source = 0;
    for (size_t k = 0; k < perm.size(); ++k) source += position[k] * strides[perm[k]];
    out.add_tile_assignment_devices(ids[source]);
    for (int k = static_cast<int>(perm.size()) - 1; k >= 0; --k) {
      if (++position[k] < sizes[perm[k]]) break;
      position[k] = 0;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<OpSharding> ToTileForm(const OpSharding& op) {
  if (op.has_named_sharding()) return NamedToTileForm(op.named_sharding());
  if (op.type() != OpSharding::TUPLE) return op;
  OpSharding out = op;
  out.clear_tuple_shardings();
  for (const OpSharding& element : op.tuple_shardings()) {
    absl::StatusOr<OpSharding> converted = ToTileForm(element);
    if (!converted.ok()) return converted.status();
    *out.add_tuple_shardings() = *std::move(converted);
  }
  return out;
}

bool Sharding::IsFullyReplicated() const {
  if (single_device || op.type() == OpSharding::REPLICATED) return true;
  if (op.type() != OpSharding::OTHER) return false;
  // Tiled only over the replication dimension.
  const int dims = op.tile_assignment_dimensions_size();
  for (int d = 0; d < dims - (op.replicate_on_last_tile_dim() ? 1 : 0); ++d) {
    if (op.tile_assignment_dimensions(d) != 1) return false;
  }
  return op.replicate_on_last_tile_dim();
}

absl::StatusOr<Sharding> ParseSharding(const ::xla::ifrt::ShardingProto& proto) {
  RecordWire("sharding", proto);
  const ::xla::ifrt::Serialized& serialized = proto.serialized_sharding();
  const std::string& type = serialized.type_name();
  Sharding out;
  if (type == kSingleDevice) {
    ::xla::ifrt::SingleDeviceShardingProto single;
    if (!single.ParseFromString(serialized.data())) {
      return absl::InvalidArgumentError("malformed SingleDeviceSharding");
    }
    out.devices = {single.device_id()};
    if (single.has_memory_kind()) out.memory_kind = single.memory_kind();
    out.op.set_type(OpSharding::REPLICATED);
    out.single_device = true;
  } else if (type == kHlo) {
    ::xla::ifrt::HloShardingProto hlo;
    if (!hlo.ParseFromString(serialized.data())) {
      return absl::InvalidArgumentError("malformed HloSharding");
    }
    out.devices = Devices(hlo.devices());
    if (hlo.has_memory_kind()) out.memory_kind = hlo.memory_kind();
    absl::StatusOr<OpSharding> op = ToTileForm(hlo.xla_op_sharding());
    if (!op.ok()) return op.status();
    out.op = *std::move(op);
  } else if (type == kConcreteEven) {
    ::xla::ifrt::ConcreteEvenShardingProto even;
    if (!even.ParseFromString(serialized.data())) {
      return absl::InvalidArgumentError("malformed ConcreteEvenSharding");
    }
    if (!even.is_fully_replicated()) {
      return absl::UnimplementedError(
          "Switchyard serves ConcreteEvenSharding only when fully replicated");
    }
    out.devices = Devices(even.devices());
    if (even.has_memory_kind()) out.memory_kind = even.memory_kind();
    out.op.set_type(OpSharding::REPLICATED);
  } else {
    return absl::UnimplementedError(
        absl::StrCat("Switchyard does not serve sharding type '", type, "'"));
  }
  if (out.devices.empty()) return absl::InvalidArgumentError("sharding without devices");
  return out;
}

absl::StatusOr<ShardLayout> LayoutShards(const Sharding& sharding,
                                         const std::vector<int64_t>& shape) {
  const size_t rank = shape.size();
  const size_t n = sharding.devices.size();
  IndexDomain full{std::vector<int64_t>(rank, 0), shape};
  ShardLayout layout;
  const OpSharding& op = sharding.op;
  switch (op.type()) {
    case OpSharding::REPLICATED:
      layout.domains.assign(n, full);
      layout.holds.assign(n, true);
      return layout;
    case OpSharding::MAXIMAL: {
      if (op.tile_assignment_devices_size() != 1) {
        return absl::InvalidArgumentError("MAXIMAL sharding names no device");
      }
      layout.domains.assign(n, full);
      layout.holds.assign(n, false);
      const int64_t index = op.tile_assignment_devices(0);
      if (index < 0 || index >= static_cast<int64_t>(n)) {
        return absl::InvalidArgumentError("MAXIMAL sharding device out of range");
      }
      layout.holds[index] = true;
      return layout;
    }
    case OpSharding::OTHER:
      break;
    default:
      return absl::UnimplementedError(absl::StrCat("Switchyard does not serve OpSharding type ",
                                                   OpSharding::Type_Name(op.type()),
                                                   " for arrays"));
  }
  // Tiled: the first `rank` tile dimensions split the array; any further ones
  // (replicate_on_last_tile_dim, last_tile_dims) replicate.
  const std::vector<int64_t> tile_dims(op.tile_assignment_dimensions().begin(),
                                       op.tile_assignment_dimensions().end());
  const size_t extra = (op.replicate_on_last_tile_dim() ? 1 : 0) + op.last_tile_dims_size();
  if (tile_dims.size() != rank + extra) {
    return absl::InvalidArgumentError(absl::StrCat("tile assignment [",
                                                   absl::StrJoin(tile_dims, ","),
                                                   "] does not fit an array of rank ", rank));
  }
  absl::StatusOr<std::vector<int64_t>> assignment = TileAssignment(op);
  if (!assignment.ok()) return assignment.status();
  std::vector<int64_t> shard_size(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (tile_dims[d] <= 0 || shape[d] % tile_dims[d] != 0) {
      return absl::UnimplementedError(
          absl::StrCat("uneven sharding: dimension ", d, " of size ", shape[d], " split ",
                       tile_dims[d], " ways; Switchyard needs sizes that divide evenly"));
    }
    shard_size[d] = shape[d] / tile_dims[d];
  }
  layout.domains.assign(n, full);
  layout.holds.assign(n, false);
  std::vector<int64_t> position(tile_dims.size(), 0);
  for (int64_t device_index : *assignment) {
    if (device_index < 0 || device_index >= static_cast<int64_t>(n)) {
      return absl::InvalidArgumentError("tile assignment names a device outside the list");
    }
    IndexDomain domain;
    for (size_t d = 0; d < rank; ++d) {
      domain.start.push_back(position[d] * shard_size[d]);
      domain.limit.push_back((position[d] + 1) * shard_size[d]);
    }
    layout.domains[device_index] = std::move(domain);
    layout.holds[device_index] = true;
    for (int k = static_cast<int>(position.size()) - 1; k >= 0; --k) {
      if (++position[k] < tile_dims[k]) break;
      position[k] = 0;
    }
  }
  return layout;
}

std::vector<int64_t> GlobalShape(const OpSharding& op, const std::vector<int64_t>& shard_shape) {
  std::vector<int64_t> shape = shard_shape;
  if (op.type() != OpSharding::OTHER) return shape;
  for (size_t d = 0;
       d < shape.size() && d < static_cast<size_t>(op.tile_assignment_dimensions_size()); ++d) {
    shape[d] *= op.tile_assignment_dimensions(d);
  }
  return shape;
}

Sharding SingleDevice(int64_t device, std::optional<std::string> memory_kind) {
  Sharding out;
  out.devices = {device};
  out.memory_kind = std::move(memory_kind);
  out.op.set_type(OpSharding::REPLICATED);
  out.single_device = true;
  return out;
}

Sharding WithDevices(const Sharding& sharding, std::vector<int64_t> devices) {
  Sharding out = sharding;
  out.devices = std::move(devices);
  return out;
}

::xla::ifrt::ShardingProto ToProto(const Sharding& sharding) {
  ::xla::ifrt::ShardingProto proto;
  ::xla::ifrt::Serialized* serialized = proto.mutable_serialized_sharding();
  if (sharding.single_device) {
    ::xla::ifrt::SingleDeviceShardingProto single;
    single.set_device_id(static_cast<int32_t>(sharding.devices.at(0)));
    if (sharding.memory_kind) single.set_memory_kind(*sharding.memory_kind);
    serialized->set_type_name(kSingleDevice);
    serialized->set_data(single.SerializeAsString());
    return proto;
  }
  ::xla::ifrt::HloShardingProto hlo;
  for (int64_t device : sharding.devices) hlo.mutable_devices()->add_device_ids(device);
  if (sharding.memory_kind) hlo.set_memory_kind(*sharding.memory_kind);
  *hlo.mutable_xla_op_sharding() = sharding.op;
  serialized->set_type_name(kHlo);
  serialized->set_data(hlo.SerializeAsString());
  return proto;
}

}  // namespace switchyard::proxy
