#include "proxy/launch_budget.h"

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace switchyard::proxy {
namespace {

TEST(LaunchBudgetTest, AFullBudgetWaitsUntilHalfIsDone) {
  LaunchBudget budget(4);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(budget.Acquire(nullptr).ok());
  std::atomic<bool> went{false};
  std::thread waiter([&] {
    EXPECT_TRUE(budget.Acquire(nullptr).ok());
    went = true;
  });
  budget.Release();  // 3 in flight: still full (one wake-up per half budget)
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(went);
  budget.Release();  // 2: half done
  waiter.join();
  EXPECT_TRUE(went);
  EXPECT_EQ(budget.in_flight(), 3);
}

TEST(LaunchBudgetTest, AWaitEndsWhenTheSessionDoes) {
  LaunchBudget budget(1);
  ASSERT_TRUE(budget.Acquire(nullptr).ok());
  std::atomic<bool> ended{false};
  std::thread end([&] {
    absl::SleepFor(absl::Milliseconds(150));
    ended = true;
  });
  const absl::Time before = absl::Now();
  absl::Status status = budget.Acquire([&] { return ended.load(); });
  end.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_LT(absl::Now() - before, absl::Seconds(5));
  EXPECT_EQ(budget.in_flight(), 1);  // a refused acquire takes nothing
}

}  // namespace
}  // namespace switchyard::proxy
