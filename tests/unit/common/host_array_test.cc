#include "common/host_array.h"

#include <cstring>
#include <numeric>

#include "gtest/gtest.h"

namespace switchyard {
namespace {

std::string Iota(int n) {
  std::string out(n * 4, '\0');
  for (int i = 0; i < n; ++i) {
    float v = static_cast<float>(i);
    std::memcpy(out.data() + 4 * i, &v, 4);
  }
  return out;
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

TEST(HostArrayTest, ExtractsAndInsertsATile) {
  const std::vector<int64_t> shape = {4, 6};
  const std::string host = Iota(24);
  IndexDomain tile{{2, 3}, {4, 6}};
  auto shard = ExtractShard(host, shape, {}, 4, tile);
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(Floats(*shard), (std::vector<float>{15, 16, 17, 21, 22, 23}));
  std::string back(24 * 4, '\0');
  ASSERT_TRUE(InsertShard(*shard, shape, {}, 4, tile, absl::MakeSpan(back)).ok());
  EXPECT_EQ(Floats(back)[15], 15);
  EXPECT_EQ(Floats(back)[0], 0);
}

TEST(HostArrayTest, FollowsByteStrides) {
  // A transposed 3x2 view of a 2x3 row-major array: strides (4, 12).
  const std::string host = Iota(6);
  IndexDomain all{{0, 0}, {3, 2}};
  auto dense = ExtractShard(host, {3, 2}, {4, 12}, 4, all);
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_EQ(Floats(*dense), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST(HostArrayTest, RegionSizeAndBadStrides) {
  EXPECT_EQ(*HostRegionBytes({2, 3}, {}, 4), 24);
  EXPECT_EQ(*HostRegionBytes({3, 2}, {4, 12}, 4), 4 * 2 + 12 + 4);
  EXPECT_EQ(*HostRegionBytes({0, 3}, {12, 4}, 4), 0);
  EXPECT_EQ(HostRegionBytes({2, 3}, {-12, 4}, 4).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(HostRegionBytes({2, 3}, {4}, 4).status().code(), absl::StatusCode::kInvalidArgument);
  // Strides that would wrap the region's size around are refused, not multiplied.
  EXPECT_EQ(HostRegionBytes({5}, {int64_t{1} << 62}, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HostRegionBytes({3, 3}, {int64_t{1} << 46, int64_t{1} << 47}, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HostArrayTest, WrongSizeOrDomainIsAnError) {
  EXPECT_FALSE(ExtractShard("abc", {2}, {}, 4, {{0}, {2}}).ok());
  EXPECT_FALSE(ExtractShard(Iota(2), {2}, {}, 4, {{0}, {3}}).ok());
}

TEST(HostArrayTest, ScalarsAndEmptyShards) {
  auto scalar = ExtractShard(Iota(1), {}, {}, 4, {{}, {}});
  ASSERT_TRUE(scalar.ok());
  EXPECT_EQ(scalar->size(), 4u);
  auto empty = ExtractShard("", {0, 4}, {}, 4, {{0, 0}, {0, 4}});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(HostArrayTest, DenseStridesAreDroppedOthersKept) {
  EXPECT_TRUE(DropDenseStrides({12, 4}, {2, 3}, 4).empty());
  EXPECT_TRUE(DropDenseStrides({}, {2, 3}, 4).empty());
  EXPECT_TRUE(DropDenseStrides({1}, {1 << 20}, 1).empty());
  EXPECT_TRUE(DropDenseStrides({999, 4}, {1, 3}, 4).empty());  // extent 1: any stride
  EXPECT_EQ(DropDenseStrides({4, 8}, {2, 3}, 4), (std::vector<int64_t>{4, 8}));    // transposed
  EXPECT_EQ(DropDenseStrides({16, 4}, {2, 3}, 4), (std::vector<int64_t>{16, 4}));  // padded
  EXPECT_EQ(DropDenseStrides({4}, {2, 3}, 4), (std::vector<int64_t>{4}));          // wrong rank
  EXPECT_EQ(DropDenseStrides({INT64_MAX, 1}, {2, INT64_MAX}, 1),  // overflows: kept
            (std::vector<int64_t>{INT64_MAX, 1}));
}

}  // namespace
}  // namespace switchyard
