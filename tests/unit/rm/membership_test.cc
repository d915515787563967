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

TEST_F(MembershipTest, EachHostsProtocolVersionReachesProxies) {
  // Proxies send a worker only what its version understands (uploads it pulls).
  RegisterWorkerRequest old_worker = Worker("h:1", 0, 0);
  old_worker.set_protocol_version(WORKER_PROTOCOL_FIRST);
  RegisterWorkerRequest new_worker = Worker("h:2", 1, 0);
  new_worker.set_protocol_version(WORKER_PROTOCOL_PULLS_PUTS);
  SY_ASSERT_OK(membership_.Register(old_worker, 11, now_).status());
  SY_ASSERT_OK(membership_.Register(new_worker, 12, now_).status());
  const Fleet fleet = membership_.Snapshot(now_);
  EXPECT_EQ(fleet.slices(0).hosts(0).protocol_version(), WORKER_PROTOCOL_FIRST);
  EXPECT_EQ(fleet.slices(1).hosts(0).protocol_version(), WORKER_PROTOCOL_PULLS_PUTS);
}

TEST_F(MembershipTest, ABootIdThatCannotTravelAsMetadataIsRefused) {
  // Proxies send the boot id as gRPC metadata, and gRPC aborts on anything but
  // printable ASCII there: such a registration must not get in.
  RegisterWorkerRequest request = Worker("h:1", 0, 0);
  request.set_boot_id(std::string("boot\n\x01", 6));
  EXPECT_EQ(membership_.Register(request, 11, now_).status().code(),
            absl::StatusCode::kInvalidArgument);
  request.set_boot_id("0123abcd");
  SY_EXPECT_OK(membership_.Register(request, 11, now_).status());
}

TEST_F(MembershipTest, ANewProcessForAHostCountsAsARestart) {
  // A supervisor restarts a dead worker before the RM sees it down: the new boot id is
  // what tells an operator that the host keeps dying.
  RegisterWorkerRequest first = Worker("h:1", 0, 0);
  first.set_boot_id("aaaa");
  SY_ASSERT_OK(membership_.Register(first, 11, now_).status());
  EXPECT_EQ(membership_.Snapshot(now_).slices(0).hosts(0).restarts(), 0);
  EXPECT_EQ(membership_.Snapshot(now_).slices(0).hosts(0).last_restart_age_ms(), -1);
  // The same process again (after an RM restart, or a broken heartbeat) is no restart.
  SY_ASSERT_OK(membership_.Register(first, 12, now_ + absl::Seconds(1)).status());
  EXPECT_EQ(membership_.Snapshot(now_).slices(0).hosts(0).restarts(), 0);
  RegisterWorkerRequest second = first;
  second.set_boot_id("bbbb");
  SY_ASSERT_OK(membership_.Register(second, 13, now_ + absl::Seconds(2)).status());
  HostStatus host = membership_.Snapshot(now_ + absl::Seconds(5)).slices(0).hosts(0);
  EXPECT_EQ(host.restarts(), 1);
  EXPECT_EQ(host.last_restart_age_ms(), 3000);
}

TEST_F(MembershipTest, AHeartbeatSaysWhatTheWorkerHoldsWithoutANewVersion) {
  SY_ASSERT_OK(membership_.Register(Worker("h:1", 0, 0), 11, now_).status());
  EXPECT_EQ(membership_.Snapshot(now_).slices(0).hosts(0).resident_bytes(), 0);  // not yet
  const uint64_t version = membership_.version();
  HeartbeatRequest report;
  report.set_incarnation(11);
  report.set_resident_bytes(300 << 20);
  report.set_buffer_bytes(-5);  // nonsense from the wire shows as nothing
  SY_EXPECT_OK(membership_.Heartbeat(11, now_ + absl::Seconds(1), report));
  const HostStatus host = membership_.Snapshot(now_ + absl::Seconds(1)).slices(0).hosts(0);
  EXPECT_EQ(host.resident_bytes(), 300 << 20);
  EXPECT_EQ(host.buffer_bytes(), 0);
  // Watchers are not woken for it: it changes with every heartbeat.
  EXPECT_EQ(membership_.version(), version);
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
  EXPECT_EQ(membership_.Heartbeat(11, now_ + absl::Seconds(5)).code(), absl::StatusCode::kNotFound);
}

TEST(MembershipStallTest, TheRmsOwnStallIsNotCountedAgainstHosts) {
  // An RM that sweeps every 250 ms was stopped for 18 s (a paused VM, a starved process):
  // the first sweep after must not declare dead hosts whose heartbeats it could not take.
  Membership membership(
      MembershipOptions{.heartbeat_timeout = kTimeout, .stall_after = absl::Seconds(1)});
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  SY_ASSERT_OK(membership.Register(Worker("h:1", 0, 0), 11, t0).status());
  SY_ASSERT_OK(membership.Register(Worker("h:2", 1, 0), 12, t0).status());
  EXPECT_TRUE(membership.Sweep(t0 + absl::Milliseconds(250)).empty());
  const absl::Time resumed = t0 + absl::Seconds(18);
  EXPECT_TRUE(membership.Sweep(resumed).empty());
  EXPECT_TRUE(membership.Snapshot(resumed).slices(0).healthy());
  // A heartbeat that waited out the stall is taken too.
  SY_EXPECT_OK(membership.Heartbeat(11, resumed + absl::Milliseconds(100)));
  // The hosts keep the time they had left; one that stays silent dies as usual.
  for (int i = 1; i <= 8; ++i) {
    SY_ASSERT_OK(membership.Heartbeat(11, resumed + i * absl::Milliseconds(500)));
    auto died = membership.Sweep(resumed + i * absl::Milliseconds(500));
    if (i < 4) {
      EXPECT_TRUE(died.empty()) << i;
    } else if (i == 4) {
      ASSERT_EQ(died.size(), 1u);
      EXPECT_EQ(died[0].address(), "h:2");
    }
  }
}

// Two hosts registered at t0, incarnations 11 and 12, with a 1 s confirmation window.
class MembershipConfirmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SY_ASSERT_OK(membership.Register(Worker("h:1", 0, 0), 11, t0).status());
    SY_ASSERT_OK(membership.Register(Worker("h:2", 1, 0), 12, t0).status());
  }
  Membership membership{
      MembershipOptions{.heartbeat_timeout = kTimeout, .confirm_window = absl::Seconds(1)}};
  const absl::Time t0 = absl::FromUnixSeconds(1000);
};

TEST_F(MembershipConfirmTest, ASilentHostThatAnswersWhenAskedStaysUp) {
  // A heartbeat delayed on its way (a starved thread, a slow connection) must not end a
  // user's job: past the timeout the host is overdue, and the RM asks it directly.
  SY_ASSERT_OK(membership.Heartbeat(12, t0 + absl::Seconds(2)));
  EXPECT_TRUE(membership.Overdue(t0 + absl::Seconds(2)).empty());
  const absl::Time late = t0 + absl::Milliseconds(2250);
  std::vector<HostStatus> overdue = membership.Overdue(late);
  ASSERT_EQ(overdue.size(), 1u);
  EXPECT_EQ(overdue[0].address(), "h:1");
  EXPECT_EQ(overdue[0].incarnation(), 11u);
  EXPECT_TRUE(overdue[0].healthy());
  EXPECT_TRUE(membership.Sweep(late).empty());
  EXPECT_TRUE(membership.Snapshot(late).slices(0).healthy());
  // It answered as itself: that counts as a heartbeat.
  SY_ASSERT_OK(membership.Heartbeat(11, late + absl::Milliseconds(300)));
  EXPECT_TRUE(membership.Overdue(late + absl::Milliseconds(300)).empty());
  EXPECT_TRUE(membership.Sweep(t0 + absl::Seconds(4)).empty());
}

TEST_F(MembershipConfirmTest, ASilentHostThatDoesNotAnswerDiesAtOnceOrWhenTheWindowEnds) {
  const absl::Time late = t0 + absl::Milliseconds(2250);
  ASSERT_EQ(membership.Overdue(late).size(), 2u);
  // h:1's address refused the question: dead now, not at the end of the window.
  membership.Evict(0, 0, 11, late);
  EXPECT_FALSE(membership.Snapshot(late).slices(0).healthy());
  EXPECT_TRUE(membership.Snapshot(late).slices(1).healthy());
  // h:2 gave no answer at all: dead once the window has passed, and no longer overdue.
  EXPECT_TRUE(membership.Sweep(t0 + absl::Seconds(3)).empty());
  auto died = membership.Sweep(t0 + absl::Milliseconds(3001));
  ASSERT_EQ(died.size(), 1u);
  EXPECT_EQ(died[0].address(), "h:2");
  EXPECT_TRUE(membership.Overdue(t0 + absl::Milliseconds(3001)).empty());
  EXPECT_EQ(membership.Heartbeat(12, t0 + absl::Seconds(4)).code(), absl::StatusCode::kNotFound);
}

TEST(MembershipStallTest, WithoutStallAfterEveryGapCounts) {
  Membership membership(kTimeout);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  SY_ASSERT_OK(membership.Register(Worker("h:1", 0, 0), 11, t0).status());
  EXPECT_EQ(membership.Sweep(t0 + absl::Seconds(18)).size(), 1u);
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
  EXPECT_EQ(membership_.Heartbeat(11, now_ + absl::Seconds(1)).code(), absl::StatusCode::kNotFound);
  SY_EXPECT_OK(membership_.Heartbeat(12, now_ + absl::Seconds(1)));
  EXPECT_EQ(membership_.HostOf(11), std::nullopt);
  EXPECT_EQ(membership_.HostOf(12), std::make_pair(0, 0));
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

TEST_F(MembershipTest, AnEvictedHolderMakesRoomForItsSuccessor) {
  SY_ASSERT_OK_AND_ASSIGN(auto first, membership_.Register(Worker("h:1", 0, 0), 11, now_));
  EXPECT_EQ(membership_.Register(Worker("h:2", 0, 0), 12, now_).status().code(),
            absl::StatusCode::kAlreadyExists);
  std::optional<HostStatus> holder = membership_.Holder(0, 0, now_);
  ASSERT_TRUE(holder.has_value());
  EXPECT_EQ(holder->address(), "h:1");
  membership_.Evict(0, 0, /*incarnation=*/99, now_);  // not the holder's: nothing happens
  EXPECT_EQ(membership_.Register(Worker("h:2", 0, 0), 12, now_).status().code(),
            absl::StatusCode::kAlreadyExists);
  membership_.Evict(0, 0, holder->incarnation(), now_);
  EXPECT_FALSE(membership_.Holder(0, 0, now_).has_value());
  SY_ASSERT_OK_AND_ASSIGN(auto second, membership_.Register(Worker("h:2", 0, 0), 12, now_));
  EXPECT_EQ(Ids(second), Ids(first));
  EXPECT_EQ(membership_.Heartbeat(11, now_).code(), absl::StatusCode::kNotFound);
}

TEST_F(MembershipTest, NumbersOutOfRangeAreRefused) {
  for (int slice : {-1, 1 << 16, INT32_MAX}) {
    EXPECT_EQ(membership_.Register(Worker("h:1", slice, 0), 1, now_).status().code(),
              absl::StatusCode::kInvalidArgument)
        << slice;
  }
  EXPECT_EQ(membership_.Register(Worker("h:1", 0, 1 << 12), 1, now_).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(membership_.Register(Worker("h:1", 0, 0, 100000), 1, now_).status().code(),
            absl::StatusCode::kInvalidArgument);
  RegisterWorkerRequest ordinal = Worker("h:1", 0, 0, 1);
  ordinal.mutable_devices(0)->set_local_ordinal(INT32_MAX);
  EXPECT_EQ(membership_.Register(ordinal, 1, now_).status().code(),
            absl::StatusCode::kInvalidArgument);
  RegisterWorkerRequest long_name = Worker(std::string(5000, 'a'), 0, 0);
  EXPECT_EQ(membership_.Register(long_name, 1, now_).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(membership_.Snapshot(now_).slices().empty());
}

TEST_F(MembershipTest, VersionGrowsWithEveryVisibleChange) {
  const uint64_t start = membership_.version();
  SY_ASSERT_OK(membership_.Register(Worker("h:1", 0, 0), 11, now_).status());
  const uint64_t joined = membership_.version();
  EXPECT_GT(joined, start);
  SY_EXPECT_OK(membership_.Heartbeat(11, now_ + absl::Seconds(1)));
  EXPECT_TRUE(membership_.Sweep(now_ + absl::Seconds(2)).empty());
  EXPECT_EQ(membership_.version(), joined);  // heartbeats change nothing a watcher sees
  EXPECT_EQ(membership_.Sweep(now_ + absl::Seconds(4)).size(), 1u);
  EXPECT_GT(membership_.version(), joined);
  EXPECT_EQ(membership_.Snapshot(now_).version(), membership_.version());
}

TEST_F(MembershipTest, DownHostsStayListedThenAreForgottenWithTheirIdsKept) {
  Membership membership(
      MembershipOptions{.heartbeat_timeout = kTimeout, .forget_after = absl::Minutes(10)});
  SY_ASSERT_OK_AND_ASSIGN(auto first, membership.Register(Worker("h:1", 0, 0), 11, now_));
  SY_ASSERT_OK(membership.Register(Worker("h:2", 1, 0), 12, now_).status());
  membership.Sweep(now_ + absl::Seconds(5));  // both down
  Fleet down = membership.Snapshot(now_ + absl::Seconds(5));
  ASSERT_EQ(down.slices_size(), 2);
  EXPECT_FALSE(down.slices(0).hosts(0).healthy());
  EXPECT_EQ(down.slices(0).hosts(0).devices_size(), 4);
  membership.Sweep(now_ + absl::Minutes(11));
  EXPECT_TRUE(membership.Snapshot(now_ + absl::Minutes(11)).slices().empty());
  EXPECT_EQ(membership.HostOf(11), std::nullopt);  // forgotten with its host
  EXPECT_EQ(membership.Heartbeat(12, now_ + absl::Minutes(11)).code(), absl::StatusCode::kNotFound);
  SY_ASSERT_OK_AND_ASSIGN(auto back,
                          membership.Register(Worker("h:3", 0, 0), 13, now_ + absl::Minutes(12)));
  EXPECT_EQ(Ids(back), Ids(first));
}

TEST_F(MembershipTest, RestoredStateKeepsIdsAndHostsRejoin) {
  SY_ASSERT_OK(membership_.Register(Worker("h:1", 1, 0), 11, now_).status());
  SY_ASSERT_OK_AND_ASSIGN(auto slice0, membership_.Register(Worker("h:2", 0, 0), 12, now_));
  const RmState state = membership_.Export();

  Membership restarted(
      MembershipOptions{.heartbeat_timeout = kTimeout, .rejoin_grace = absl::Seconds(10)});
  SY_ASSERT_OK(restarted.Restore(state, now_));
  Fleet fleet = restarted.Snapshot(now_);
  ASSERT_EQ(fleet.slices_size(), 2);
  EXPECT_TRUE(fleet.slices(0).hosts(0).rejoining());
  EXPECT_FALSE(fleet.slices(0).hosts(0).healthy());
  // Hosts register again in any order; each gets its old ids.
  SY_ASSERT_OK_AND_ASSIGN(auto again, restarted.Register(Worker("h:2", 0, 0), 21, now_));
  EXPECT_EQ(Ids(again), Ids(slice0));
  EXPECT_EQ(Ids(again), (std::vector<int64_t>{4, 5, 6, 7}));
  SY_ASSERT_OK_AND_ASSIGN(auto fresh, restarted.Register(Worker("h:3", 2, 0), 22, now_));
  EXPECT_EQ(Ids(fresh), (std::vector<int64_t>{8, 9, 10, 11}));
  // The host that does not come back is down once the grace has passed.
  EXPECT_TRUE(restarted.Sweep(now_ + absl::Seconds(1)).empty());
  auto gone = restarted.Sweep(now_ + absl::Seconds(11));
  ASSERT_EQ(gone.size(), 3u);  // slice 1 never came back; slices 0 and 2 stopped heartbeating
  Fleet later = restarted.Snapshot(now_ + absl::Seconds(11));
  EXPECT_FALSE(later.slices(1).hosts(0).rejoining());
  EXPECT_FALSE(later.slices(1).hosts(0).healthy());
}

TEST_F(MembershipTest, ContradictoryStateIsRefused) {
  RmState state;
  state.set_next_device_id(2);
  for (int ordinal : {0, 1}) {
    RmState::DeviceId* id = state.add_device_ids();
    id->set_local_ordinal(ordinal);
    id->set_global_id(1);  // twice
  }
  Membership restarted(kTimeout);
  EXPECT_EQ(restarted.Restore(state, now_).code(), absl::StatusCode::kInvalidArgument);
}

RegisterWorkerRequest WorkerOfKind(const std::string& address, int slice, int host, int devices,
                                   const std::string& kind) {
  RegisterWorkerRequest request = Worker(address, slice, host, devices);
  for (DeviceInfo& device : *request.mutable_devices()) device.set_kind(kind);
  return request;
}

TEST(InstanceTypeTest, ParsesPathwaysInstanceTypes) {
  ExpectedFleet fleet;
  SY_ASSERT_OK(ParseInstanceType("tpuv5e:4x8", &fleet));
  EXPECT_EQ(fleet.kind, "tpuv5e");
  EXPECT_EQ(fleet.devices_per_slice, 32);
  SY_ASSERT_OK(ParseInstanceType("NVIDIA-H200:8", &fleet));
  EXPECT_EQ(fleet.kind, "nvidiah200");
  EXPECT_EQ(fleet.devices_per_slice, 8);
  SY_ASSERT_OK(ParseInstanceType("", &fleet));
  EXPECT_EQ(fleet.kind, "");
  EXPECT_EQ(fleet.devices_per_slice, 0);
  for (const char* bad : {"cpu", ":4", "cpu:", "cpu:4x", "cpu:0", "cpu:-2", "cpu:4xy",
                          "cpu:99999999999999999999", "cpu:65536x65536x65536"}) {
    EXPECT_EQ(ParseInstanceType(bad, &fleet).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ExpectedFleetTest, AWorkerOutsideTheDeclaredFleetIsRefusedForGood) {
  MembershipOptions options{.heartbeat_timeout = kTimeout};
  options.expected.slices = 2;
  SY_ASSERT_OK(ParseInstanceType("nvidia-h200:2x2", &options.expected));
  Membership membership(options);
  const absl::Time now = absl::FromUnixSeconds(1000);
  SY_EXPECT_OK(membership.Register(WorkerOfKind("h:1", 0, 0, 2, "NVIDIA H200"), 1, now).status());
  SY_EXPECT_OK(membership.Register(WorkerOfKind("h:2", 0, 1, 2, "NVIDIA H200"), 2, now).status());
  struct Case {
    RegisterWorkerRequest request;
    const char* reason;
  };
  for (const Case& refused : {
           Case{WorkerOfKind("h:3", 2, 0, 2, "NVIDIA H200"), "outside the fleet's 2 slices"},
           Case{WorkerOfKind("h:4", 1, 0, 2, "cpu"), "has 'cpu' devices"},
           Case{WorkerOfKind("h:5", 0, 2, 1, "NVIDIA H200"), "would give its slice 5 devices"},
           Case{WorkerOfKind("h:6", 1, 0, 5, "NVIDIA H200"), "would give its slice 5 devices"},
       }) {
    absl::Status status = membership.Register(refused.request, 9, now).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << refused.reason;
    EXPECT_NE(status.message().find("does not match with the expected instances"),
              std::string::npos);
    EXPECT_NE(status.message().find(refused.reason), std::string::npos) << status.message();
  }
  // A host that comes back in its own place does not count against its slice twice.
  SY_EXPECT_OK(
      membership.Register(WorkerOfKind("h:7", 0, 1, 2, "NVIDIA H200"), 3, now + absl::Seconds(10))
          .status());
  EXPECT_EQ(membership.Snapshot(now).slices_size(), 1);
}

}  // namespace
}  // namespace switchyard::rm
