#include "proxy/version.h"

#include "gtest/gtest.h"

namespace switchyard::proxy {
namespace {

struct Case {
  Version min, max;
  Version want;
};

TEST(VersionTest, ChoosesTheHighestCommonVersion) {
  for (const Case& c : {
           Case{{16, 0}, {25, 6}, {25, 6}},  // jaxlib 0.11.2
           Case{{16, 0}, {25, 5}, {25, 5}},  // jaxlib 0.11.1
           Case{{16, 0}, {25, 3}, {25, 3}},  // jaxlib 0.10.2
           Case{{16, 0}, {30, 9}, {25, 6}},  // a newer client still overlaps
           Case{{14, 0}, {20, 2}, {20, 2}},
       }) {
    auto chosen = ChooseVersion(c.min, c.max);
    ASSERT_TRUE(chosen.ok()) << chosen.status();
    EXPECT_EQ(chosen->protocol, c.want.protocol);
    EXPECT_EQ(chosen->serdes, c.want.serdes);
  }
}

TEST(VersionTest, NoOverlapIsInvalidArgumentNamingBothRanges) {
  for (const Case& c :
       {Case{{26, 0}, {30, 6}, {}}, Case{{10, 0}, {15, 6}, {}}, Case{{16, 7}, {25, 9}, {}}}) {
    auto chosen = ChooseVersion(c.min, c.max);
    ASSERT_EQ(chosen.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(chosen.status().message().find("16..25"), std::string::npos);
  }
}

}  // namespace
}  // namespace switchyard::proxy
