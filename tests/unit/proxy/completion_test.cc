#include "proxy/completion.h"

#include <optional>
#include <vector>

#include "gtest/gtest.h"

namespace switchyard::proxy {
namespace {

TEST(CompletionTest, AWaiterRunsWhenItSettlesAndOnlyTheFirstSettlingCounts) {
  Completion completion;
  EXPECT_FALSE(completion.Now().has_value());
  std::vector<absl::Status> seen;
  EXPECT_FALSE(completion.NowOrThen([&](absl::Status s) { seen.push_back(s); }).has_value());
  completion.Settle(absl::DataLossError("slice 1 lost"));
  completion.Settle(absl::OkStatus());  // ignored
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_TRUE(absl::IsDataLoss(seen[0]));
  ASSERT_TRUE(completion.Now().has_value());
  EXPECT_TRUE(absl::IsDataLoss(*completion.Now()));
}

TEST(CompletionTest, AfterSettlingTheStatusComesAtOnceAndNothingIsKept) {
  Completion completion;
  completion.Settle(absl::OkStatus());
  bool ran = false;
  std::optional<absl::Status> now = completion.NowOrThen([&](absl::Status) { ran = true; });
  ASSERT_TRUE(now.has_value());
  EXPECT_TRUE(now->ok());
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace switchyard::proxy
