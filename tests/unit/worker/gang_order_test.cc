#include "worker/gang_order.h"

#include "gtest/gtest.h"

namespace switchyard::worker {
namespace {

TEST(GangOrderTest, LaunchesGoInTheirNumbersOrder) {
  GangOrder order;
  EXPECT_EQ(order.Next(7), 1u);
  EXPECT_TRUE(order.MayGo(7, 1));
  EXPECT_FALSE(order.MayGo(7, 2));  // arrived first on another stream: waits for 1
  order.Passed(7, 1);
  EXPECT_TRUE(order.MayGo(7, 2));
  EXPECT_FALSE(order.MayGo(7, 3));
  order.Passed(7, 2);
  EXPECT_EQ(order.Next(7), 3u);
}

TEST(GangOrderTest, UnnumberedLaunchesAreNotOrdered) {
  GangOrder order;
  EXPECT_TRUE(order.MayGo(7, 0));
  EXPECT_FALSE(order.Late(7, 0));
  order.Passed(7, 0);
  EXPECT_EQ(order.owners(), 0u);
}

TEST(GangOrderTest, OwnersAreOrderedApart) {
  GangOrder order;
  order.Passed(1, 1);
  EXPECT_TRUE(order.MayGo(1, 2));
  EXPECT_FALSE(order.MayGo(2, 2));  // another numbering starts at 1 of its own
  EXPECT_TRUE(order.MayGo(2, 1));
}

TEST(GangOrderTest, NumbersPassedOutOfOrderWaitForThoseBefore) {
  GangOrder order;
  order.Passed(1, 3);  // void (its session ended) while 1 and 2 are on their way
  order.Passed(1, 5);
  EXPECT_EQ(order.Next(1), 1u);
  EXPECT_TRUE(order.Late(1, 3));  // its launch, arriving after all, must not go
  EXPECT_FALSE(order.MayGo(1, 4));
  order.Passed(1, 1);
  order.Passed(1, 2);
  EXPECT_EQ(order.Next(1), 4u);  // over 3
  EXPECT_TRUE(order.MayGo(1, 4));
  order.Passed(1, 4);
  EXPECT_EQ(order.Next(1), 6u);  // and over 5
  EXPECT_FALSE(order.Late(1, 6));
}

TEST(GangOrderTest, OneThatGaveUpWaitingLetsTheLaterOnesGoAndTheSkippedAreLate) {
  GangOrder order;
  order.Passed(1, 5);
  order.PassThrough(1, 3);  // gave up waiting for 1 and 2
  EXPECT_EQ(order.Next(1), 4u);
  EXPECT_TRUE(order.Late(1, 2));
  EXPECT_TRUE(order.MayGo(1, 4));
  order.Passed(1, 4);
  EXPECT_EQ(order.Next(1), 6u);
  order.PassThrough(1, 2);  // behind the order already: nothing moves back
  EXPECT_EQ(order.Next(1), 6u);
}

TEST(GangOrderTest, AForgottenOwnerStartsAgain) {
  GangOrder order;
  order.PassThrough(1, 5);
  order.Forget(1);
  EXPECT_EQ(order.Next(1), 1u);
  EXPECT_FALSE(order.MayGo(1, 2));
  EXPECT_FALSE(order.Late(1, 1));
}

}  // namespace
}  // namespace switchyard::worker
