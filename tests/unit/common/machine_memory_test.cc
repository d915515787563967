#include "common/machine_memory.h"

#include <map>
#include <optional>
#include <string>

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

// A file system of limit files, by path.
auto Files(std::map<std::string, std::string> files) {
  return [files = std::move(files)](const std::string& path) -> std::optional<std::string> {
    auto it = files.find(path);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
}

TEST(MachineMemoryTest, TheLowestLimitFromTheProcesssCgroupUpCounts) {
  // v2, a systemd service with MemoryMax= inside a slice with a higher one.
  EXPECT_EQ(
      CgroupMemoryLimit(
          "0::/system.slice/switchyard.service\n",
          Files({{"/sys/fs/cgroup/system.slice/switchyard.service/memory.max", "4294967296\n"},
                 {"/sys/fs/cgroup/system.slice/memory.max", "8589934592\n"},
                 {"/sys/fs/cgroup/memory.max", "max\n"}})),
      int64_t{4} << 30);
  // A parent lower than the process's own.
  EXPECT_EQ(CgroupMemoryLimit("0::/a/b\n", Files({{"/sys/fs/cgroup/a/b/memory.max", "max"},
                                                  {"/sys/fs/cgroup/a/memory.max", "1000"}})),
            1000);
  // v1: the memory controller's line (this is what a hybrid host writes).
  EXPECT_EQ(CgroupMemoryLimit(
                "4:memory:/jobs/7\n3:cpu,cpuacct:/\n0::/\n",
                Files({{"/sys/fs/cgroup/memory/jobs/7/memory.limit_in_bytes", "2147483648"},
                       {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712"}})),
            int64_t{2} << 30);
  // A container's namespace: its cgroup is the root.
  EXPECT_EQ(CgroupMemoryLimit("0::/\n", Files({{"/sys/fs/cgroup/memory.max", "5000\n"}})), 5000);
  EXPECT_EQ(CgroupMemoryLimit("", Files({{"/sys/fs/cgroup/memory.max", "5000\n"}})), 5000);
  // No limit anywhere, or a path the kernel would not write.
  EXPECT_EQ(CgroupMemoryLimit("0::/a\n", Files({{"/sys/fs/cgroup/a/memory.max", "max"}})),
            std::nullopt);
  EXPECT_EQ(CgroupMemoryLimit("0::/../etc\n", Files({{"/sys/fs/cgroup/memory.max", "5"}})),
            std::nullopt);
}

TEST(MachineMemoryTest, TheLimitIsNeverMoreThanTheMachine) {
  const int64_t physical = PhysicalMemoryBytes();
  ASSERT_GT(physical, 0);  // Linux says
  EXPECT_GT(MemoryLimitBytes(), 0);
  EXPECT_LE(MemoryLimitBytes(), physical);
}

}  // namespace
}  // namespace switchyard
