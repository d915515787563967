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
  order.Passed(7, 0);
  EXPECT_EQ(order.owners(), 0u);
}

TEST(GangOrderTest, OwnersAreOrderedApart) {
  GangOrder order;
  order.Passed(1, 1);
  EXPECT_TRUE(order.MayGo(1, 2));
  EXPECT_FALSE(order.MayGo(2, 2));  // another proxy's numbers start at 1 of their own
  EXPECT_TRUE(order.MayGo(2, 1));
}

TEST(GangOrderTest, NumbersOnlyMoveForward) {
  GangOrder order;
  order.Passed(1, 3);  // one gave up waiting for 1 and 2: later ones are not stuck
  EXPECT_TRUE(order.MayGo(1, 4));
  order.Passed(1, 2);  // a late one passing does not move the order back
  EXPECT_EQ(order.Next(1), 4u);
  EXPECT_TRUE(order.MayGo(1, 2));  // and it may still go
}

TEST(GangOrderTest, AForgottenOwnerStartsAgain) {
  GangOrder order;
  order.Passed(1, 5);
  order.Forget(1);
  EXPECT_EQ(order.Next(1), 1u);
  EXPECT_FALSE(order.MayGo(1, 2));
}

}  // namespace
}  // namespace switchyard::worker
