#include "worker/owner_leases.h"

#include "gtest/gtest.h"

namespace switchyard::worker {
namespace {

constexpr absl::Duration kGrace = absl::Seconds(3);

class OwnerLeasesTest : public ::testing::Test {
 protected:
  OwnerLeases leases_{kGrace};
  absl::Time t0_ = absl::FromUnixSeconds(1000);
};

TEST_F(OwnerLeasesTest, AnOpenStreamHoldsTheLease) {
  leases_.Opened(7, t0_);
  EXPECT_TRUE(leases_.Expire(t0_ + absl::Hours(1)).empty());
  EXPECT_EQ(leases_.size(), 1u);
}

TEST_F(OwnerLeasesTest, ExpiresGraceAfterTheLastStreamCloses) {
  leases_.Opened(7, t0_);
  leases_.Opened(7, t0_);
  leases_.Closed(7, t0_ + absl::Seconds(1));
  EXPECT_TRUE(leases_.Expire(t0_ + absl::Seconds(10)).empty());  // one stream still open
  leases_.Closed(7, t0_ + absl::Seconds(10));
  EXPECT_TRUE(leases_.Expire(t0_ + absl::Seconds(12)).empty());
  EXPECT_EQ(leases_.Expire(t0_ + absl::Seconds(14)), std::vector<uint64_t>{7});
  EXPECT_EQ(leases_.size(), 0u);
  EXPECT_TRUE(leases_.Expire(t0_ + absl::Seconds(20)).empty());  // reported once
}

TEST_F(OwnerLeasesTest, AReconnectWithinTheGraceKeepsEverything) {
  leases_.Opened(7, t0_);
  leases_.Closed(7, t0_ + absl::Seconds(1));
  leases_.Opened(7, t0_ + absl::Seconds(2));
  EXPECT_TRUE(leases_.Expire(t0_ + absl::Seconds(60)).empty());
}

TEST_F(OwnerLeasesTest, CallsWithoutAStreamStartALease) {
  leases_.Touched(9, t0_);
  EXPECT_TRUE(leases_.Expire(t0_ + absl::Seconds(2)).empty());
  leases_.Touched(9, t0_ + absl::Seconds(2));  // renews it
  EXPECT_TRUE(leases_.Expire(t0_ + absl::Seconds(4)).empty());
  EXPECT_EQ(leases_.Expire(t0_ + absl::Seconds(6)), std::vector<uint64_t>{9});
  // A stream holds it regardless of touches.
  leases_.Opened(10, t0_);
  leases_.Touched(10, t0_);
  EXPECT_TRUE(leases_.Expire(t0_ + absl::Hours(1)).empty());
}

TEST_F(OwnerLeasesTest, OwnersAreIndependentAndStrayClosesAreIgnored) {
  leases_.Closed(3, t0_);  // never opened
  leases_.Opened(1, t0_);
  leases_.Opened(2, t0_);
  leases_.Closed(1, t0_);
  EXPECT_EQ(leases_.Expire(t0_ + absl::Seconds(4)), std::vector<uint64_t>{1});
  EXPECT_EQ(leases_.size(), 1u);
}

}  // namespace
}  // namespace switchyard::worker
