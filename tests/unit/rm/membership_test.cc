#include "rm/membership.h"

#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace switchyard::rm {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(2);

RegisterWorkerRequest Worker(const std::string& address, int slice, int host, int devices = 4) {
  RegisterWorkerRequest request;
  request.set_address(address);
  request.set_slice_index(slice);
  request.set_host_index(host);
  request.set_pid(1234);
  for (int i = 0; i < devices; ++i) request.add_devices()->set_local_ordinal(i);
  return request;
}

std::vector<int64_t> Ids(const RegisterWorkerResponse& response) {
  std::vector<int64_t> ids;
  for (const DeviceInfo& device : response.devices()) ids.push_back(device.global_id());
  return ids;
}

class MembershipTest : public ::testing::Test {
 protected:
  Membership membership_{kTimeout};
  absl::Time now_ = absl::FromUnixSeconds(1000);
};

TEST_F(MembershipTest, AssignsIdsInJoinOrder) {
  SY_ASSERT_OK_AND_ASSIGN(auto a, membership_.Register(Worker("h:1", 0, 0), 11, now_));
  SY_ASSERT_OK_AND_ASSIGN(auto b, membership_.Register(Worker("h:2", 1, 0), 12, now_));
  EXPECT_EQ(Ids(a), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(Ids(b), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(a.devices(2).slice_index(), 0);
  EXPECT_EQ(b.devices(2).slice_index(), 1);
  Fleet fleet = membership_.Snapshot(now_);
  ASSERT_EQ(fleet.slices_size(), 2);
  EXPECT_TRUE(fleet.slices(0).healthy());
  EXPECT_EQ(fleet.slices(1).hosts(0).devices_size(), 4);
}

TEST_F(MembershipTest, MissedHeartbeatsMakeAHostUnhealthy) {
  SY_ASSERT_OK(membership_.Register(Worker("h:1", 0, 0), 11, now_).status());
  SY_EXPECT_OK(membership_.Heartbeat(11, now_ + absl::Seconds(1)));
  EXPECT_TRUE(membership_.Sweep(now_ + absl::Seconds(2)).empty());
  auto died = membership_.Sweep(now_ + absl::Seconds(4));
  ASSERT_EQ(died.size(), 1u);
  EXPECT_EQ(died[0].address(), "h:1");
  EXPECT_FALSE(membership_.Snapshot(now_ + absl::Seconds(4)).slices(0).healthy());
  // A declared-dead incarnation must register again, even if it comes back.
  EXPECT_EQ(membership_.Heartbeat(11, now_ + absl::Seconds(5)).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(MembershipTest, RestartedWorkerGetsTheSameIds) {
  SY_ASSERT_OK(membership_.Register(Worker("h:1", 0, 0), 11, now_).status());
  SY_ASSERT_OK_AND_ASSIGN(auto first, membership_.Register(Worker("h:2", 1, 0), 12, now_));
  membership_.Sweep(now_ + absl::Seconds(10));
  SY_ASSERT_OK_AND_ASSIGN(auto again,
                          membership_.Register(Worker("h:9", 1, 0), 13, now_ + absl::Seconds(11)));
  EXPECT_EQ(Ids(again), Ids(first));
  Fleet fleet = membership_.Snapshot(now_ + absl::Seconds(11));
  EXPECT_TRUE(fleet.slices(1).healthy());
  EXPECT_EQ(fleet.slices(1).hosts(0).registrations(), 2);
  EXPECT_EQ(fleet.slices(1).hosts(0).address(), "h:9");
}

TEST_F(MembershipTest, DuplicateOfALiveHostIsRefused) {
  SY_ASSERT_OK(membership_.Register(Worker("h:1", 0, 0), 11, now_).status());
  auto duplicate = membership_.Register(Worker("h:2", 0, 0), 12, now_ + absl::Seconds(1));
  EXPECT_EQ(duplicate.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(duplicate.status().message().find("h:1"), std::string::npos);
  // The live worker keeps its place.
  SY_EXPECT_OK(membership_.Heartbeat(11, now_ + absl::Seconds(1)));
}

TEST_F(MembershipTest, SameAddressReplacesTheOldProcess) {
  SY_ASSERT_OK(membership_.Register(Worker("h:1", 0, 0), 11, now_).status());
  SY_ASSERT_OK(membership_.Register(Worker("h:1", 0, 0), 12, now_ + absl::Seconds(1)).status());
  EXPECT_EQ(membership_.Heartbeat(11, now_ + absl::Seconds(1)).code(),
            absl::StatusCode::kNotFound);
  SY_EXPECT_OK(membership_.Heartbeat(12, now_ + absl::Seconds(1)));
}

TEST_F(MembershipTest, MalformedRegistrationsAreInvalidArgument) {
  EXPECT_EQ(membership_.Register(Worker("", 0, 0), 1, now_).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(membership_.Register(Worker("h:1", -1, 0), 1, now_).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(membership_.Register(Worker("h:1", 0, 0, 0), 1, now_).status().code(),
            absl::StatusCode::kInvalidArgument);
  RegisterWorkerRequest repeated = Worker("h:1", 0, 0, 2);
  repeated.mutable_devices(1)->set_local_ordinal(0);
  EXPECT_EQ(membership_.Register(repeated, 1, now_).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(membership_.Snapshot(now_).slices().empty());
}

TEST_F(MembershipTest, UnknownIncarnationIsNotFound) {
  EXPECT_EQ(membership_.Heartbeat(42, now_).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace switchyard::rm
