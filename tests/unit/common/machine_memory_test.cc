#include "common/machine_memory.h"

#include "gtest/gtest.h"

namespace switchyard {
namespace {

TEST(MachineMemoryTest, ACgroupLimitIsANumberOfBytes) {
  EXPECT_EQ(ParseCgroupMemoryLimit("8589934592\n"), int64_t{8} << 30);
  EXPECT_EQ(ParseCgroupMemoryLimit("max\n"), std::nullopt);                  // v2: none
  EXPECT_EQ(ParseCgroupMemoryLimit("9223372036854771712\n"), std::nullopt);  // v1: none
  EXPECT_EQ(ParseCgroupMemoryLimit(""), std::nullopt);
  EXPECT_EQ(ParseCgroupMemoryLimit("0"), std::nullopt);
  EXPECT_EQ(ParseCgroupMemoryLimit("-5"), std::nullopt);
  EXPECT_EQ(ParseCgroupMemoryLimit("12ab"), std::nullopt);
}

TEST(MachineMemoryTest, TheLimitIsNeverMoreThanTheMachine) {
  const int64_t physical = PhysicalMemoryBytes();
  ASSERT_GT(physical, 0);  // Linux says
  EXPECT_GT(MemoryLimitBytes(), 0);
  EXPECT_LE(MemoryLimitBytes(), physical);
}

}  // namespace
}  // namespace switchyard
