#include "proxy/sharding.h"

#include "gtest/gtest.h"

namespace switchyard::proxy {
namespace {

using switchyard::xla::OpSharding;

::xla::ifrt::ShardingProto HloProto(const std::vector<int32_t>& devices, const OpSharding& op) {
  ::xla::ifrt::HloShardingProto hlo;
  for (int32_t d : devices) hlo.mutable_devices()->add_device_ids(d);
  *hlo.mutable_xla_op_sharding() = op;
  ::xla::ifrt::ShardingProto proto;
  proto.mutable_serialized_sharding()->set_type_name("xla::ifrt::HloSharding");
  proto.mutable_serialized_sharding()->set_data(hlo.SerializeAsString());
  return proto;
}

TEST(ShardingTest, TiledOverRowsWithExplicitDevices) {
  OpSharding op;
  op.set_type(OpSharding::OTHER);
  op.add_tile_assignment_dimensions(2);
  op.add_tile_assignment_dimensions(1);
  op.add_tile_assignment_devices(1);
  op.add_tile_assignment_devices(0);
  auto sharding = ParseSharding(HloProto({4, 5}, op));
  ASSERT_TRUE(sharding.ok()) << sharding.status();
  auto layout = LayoutShards(*sharding, {6, 3});
  ASSERT_TRUE(layout.ok()) << layout.status();
  // Device-list entry 1 (device 5) holds the first rows.
  EXPECT_EQ(layout->domains[1].start, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(layout->domains[0].start, (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(layout->domains[0].shape(), (std::vector<int64_t>{3, 3}));
  EXPECT_FALSE(sharding->IsFullyReplicated());
  EXPECT_EQ(GlobalShape(sharding->op, {3, 3}), (std::vector<int64_t>{6, 3}));
}

TEST(ShardingTest, IotaTransposedAndPartiallyReplicated) {
  OpSharding op;
  op.set_type(OpSharding::OTHER);
  op.add_tile_assignment_dimensions(2);
  op.add_tile_assignment_dimensions(2);
  op.set_replicate_on_last_tile_dim(true);
  op.add_iota_reshape_dims(2);
  op.add_iota_reshape_dims(2);
  op.add_iota_transpose_perm(1);
  op.add_iota_transpose_perm(0);
  auto sharding = ParseSharding(HloProto({0, 1, 2, 3}, op));
  ASSERT_TRUE(sharding.ok());
  auto layout = LayoutShards(*sharding, {8});
  ASSERT_TRUE(layout.ok()) << layout.status();
  // iota [[0,1],[2,3]] transposed -> [[0,2],[1,3]]: devices 0 and 2 hold the first half.
  EXPECT_EQ(layout->domains[0].start[0], 0);
  EXPECT_EQ(layout->domains[2].start[0], 0);
  EXPECT_EQ(layout->domains[1].start[0], 4);
  EXPECT_EQ(layout->domains[3].start[0], 4);
}

TEST(ShardingTest, UnevenTilingIsUnimplemented) {
  OpSharding op;
  op.set_type(OpSharding::OTHER);
  op.add_tile_assignment_dimensions(3);
  op.add_tile_assignment_devices(0);
  op.add_tile_assignment_devices(1);
  op.add_tile_assignment_devices(2);
  auto sharding = ParseSharding(HloProto({0, 1, 2}, op));
  ASSERT_TRUE(sharding.ok());
  EXPECT_EQ(LayoutShards(*sharding, {8}).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(ShardingTest, NamedShardingBecomesTiles) {
  OpSharding op;
  auto* named = op.mutable_named_sharding();
  auto* a = named->mutable_mesh()->add_axes();
  a->set_name("a");
  a->set_size(2);
  auto* b = named->mutable_mesh()->add_axes();
  b->set_name("b");
  b->set_size(2);
  named->add_dim_shardings()->add_axes()->set_mesh_axis_index(1);  // dim 0 over "b"
  named->add_dim_shardings();                                      // dim 1 unsharded
  auto tiled = ToTileForm(op);
  ASSERT_TRUE(tiled.ok()) << tiled.status();
  EXPECT_EQ(tiled->type(), OpSharding::OTHER);
  EXPECT_TRUE(tiled->replicate_on_last_tile_dim());
  EXPECT_EQ(std::vector<int64_t>(tiled->tile_assignment_dimensions().begin(),
                                 tiled->tile_assignment_dimensions().end()),
            (std::vector<int64_t>{2, 1, 2}));
  // Mesh [[0,1],[2,3]] with "b" major: [[0,2],[1,3]].
  EXPECT_EQ(std::vector<int64_t>(tiled->tile_assignment_devices().begin(),
                                 tiled->tile_assignment_devices().end()),
            (std::vector<int64_t>{0, 2, 1, 3}));

  OpSharding empty;
  empty.mutable_named_sharding()->mutable_mesh();
  EXPECT_EQ(ToTileForm(empty)->type(), OpSharding::REPLICATED);
}

TEST(ShardingTest, SingleDeviceRoundTrip) {
  auto parsed = ParseSharding(ToProto(SingleDevice(7, "device")));
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(parsed->single_device);
  EXPECT_EQ(parsed->devices, std::vector<int64_t>{7});
  EXPECT_EQ(*parsed->memory_kind, "device");
  EXPECT_TRUE(parsed->IsFullyReplicated());
}

TEST(ShardingTest, UnknownOrMalformedShardings) {
  ::xla::ifrt::ShardingProto unknown;
  unknown.mutable_serialized_sharding()->set_type_name("xla::ifrt::SomethingNew");
  EXPECT_EQ(ParseSharding(unknown).status().code(), absl::StatusCode::kUnimplemented);
  ::xla::ifrt::ShardingProto garbage;
  garbage.mutable_serialized_sharding()->set_type_name("xla::ifrt::HloSharding");
  garbage.mutable_serialized_sharding()->set_data("\xff\xff\xff");
  EXPECT_EQ(ParseSharding(garbage).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace switchyard::proxy
