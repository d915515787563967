// The huge-page choice: the setting decides, else a hypervisor taking back free
// memory turns huge pages off; and the sysfs reading that says so.

#include "common/huge_pages.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "gtest/gtest.h"

namespace switchyard {
namespace {

TEST(HugePagesTest, TheSettingDecidesElseFreePageReportingTurnsThemOff) {
  EXPECT_TRUE(ChooseHugePages(nullptr, false).use);
  EXPECT_FALSE(ChooseHugePages(nullptr, true).use);
  EXPECT_TRUE(ChooseHugePages("1", true).use);
  EXPECT_FALSE(ChooseHugePages("0", false).use);
  EXPECT_FALSE(ChooseHugePages("yes", true).use);  // not a decision: automatic
  EXPECT_NE(ChooseHugePages(nullptr, true).why.find("free page reporting"), std::string::npos);
  EXPECT_NE(ChooseHugePages("0", false).why.find("SWITCHYARD_HUGE_PAGES=0"), std::string::npos);
}

class FreePageReportingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Its own directory: ctest runs the tests of this suite side by side.
    root_ = std::filesystem::path(::testing::TempDir()) /
            ("virtio-devices-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void Device(const std::string& name, const std::string& id, const std::string& features,
              bool bound) {
    const auto dir = root_ / name;
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "device") << id << "\n";
    std::ofstream(dir / "features") << features << "\n";
    if (bound) std::filesystem::create_directories(dir / "driver");
  }
  std::filesystem::path root_;
};

TEST_F(FreePageReportingTest, ABoundBalloonWithTheReportingFeature) {
  Device("virtio1", "0x0002", "0000011111", true);  // a block device: not a balloon
  EXPECT_FALSE(FreePageReporting(root_));
  Device("virtio0", "0x0005", "0110010000", false);  // no driver bound
  EXPECT_FALSE(FreePageReporting(root_));
  std::filesystem::create_directories(root_ / "virtio0" / "driver");
  EXPECT_TRUE(FreePageReporting(root_));
}

TEST_F(FreePageReportingTest, ABalloonWithoutItOrNoSysfs) {
  Device("virtio0", "0x0005", "0110000000", true);  // stats and deflate-on-OOM only
  EXPECT_FALSE(FreePageReporting(root_));
  Device("virtio9", "0x0005", "011", true);  // fewer bits than the feature's
  EXPECT_FALSE(FreePageReporting(root_));
  EXPECT_FALSE(FreePageReporting((root_ / "absent").string()));
}

}  // namespace
}  // namespace switchyard
