#include "rm/leases.h"

#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace switchyard::rm {
namespace {

// A fleet of `slices` healthy slices of one host with `devices` CPU devices each.
Fleet Pool(int slices, int devices = 1) {
  Fleet fleet;
  for (int s = 0; s < slices; ++s) {
    SliceStatus* slice = fleet.add_slices();
    slice->set_slice_index(s);
    slice->set_healthy(true);
    HostStatus* host = slice->add_hosts();
    host->set_slice_index(s);
    host->set_healthy(true);
    for (int d = 0; d < devices; ++d) host->add_devices()->set_kind("cpu");
  }
  return fleet;
}

LeaseSpec Ask(const std::string& tenant, int slices = 1, int devices = 1) {
  LeaseSpec spec;
  spec.owner = "test";
  spec.tenant = tenant;
  for (int i = 0; i < slices; ++i) spec.shapes.push_back(SliceShape{"cpu", devices});
  return spec;
}

class LeasesTest : public ::testing::Test {
 protected:
  uint64_t Queue(LeaseSpec spec) {
    absl::StatusOr<uint64_t> id = leases_.Request(std::move(spec), fleet_, now_);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or(0);
  }
  std::vector<int> Slices(uint64_t id) { return leases_.Get(id).value().slices; }
  int Position(uint64_t id) { return leases_.Get(id).value().queue_position; }

  Fleet fleet_ = Pool(4);
  absl::Time now_ = absl::FromUnixSeconds(1000);
  Leases leases_{LeaseOptions{}};
};

TEST_F(LeasesTest, PlacesOnFreeSlicesAndQueuesTheRest) {
  std::vector<uint64_t> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(Queue(Ask("t")));
  EXPECT_EQ(leases_.Place(fleet_, now_).size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Slices(ids[i]), std::vector<int>{i});
  EXPECT_TRUE(Slices(ids[4]).empty());
  EXPECT_EQ(Position(ids[4]), 1);
  // The fifth is placed on the slice the second gives back.
  leases_.Release(ids[1]);
  EXPECT_EQ(leases_.Place(fleet_, now_), std::vector<uint64_t>{ids[4]});
  EXPECT_EQ(Slices(ids[4]), std::vector<int>{1});
  EXPECT_FALSE(leases_.Get(ids[1]).has_value());
}

TEST_F(LeasesTest, ALeaseIsPlacedWholeAndBlocksThoseBehindIt) {
  const uint64_t first = Queue(Ask("t", 3));
  leases_.Place(fleet_, now_);
  EXPECT_EQ(Slices(first), (std::vector<int>{0, 1, 2}));
  const uint64_t big = Queue(Ask("t", 2));
  const uint64_t small = Queue(Ask("t", 1));
  EXPECT_TRUE(leases_.Place(fleet_, now_).empty());  // one free slice: big waits, small too
  EXPECT_EQ(Position(big), 1);
  EXPECT_EQ(Position(small), 2);
  leases_.Release(first);
  EXPECT_EQ(leases_.Place(fleet_, now_), (std::vector<uint64_t>{big, small}));
}

TEST_F(LeasesTest, RefusesWhatTheFleetCouldNeverHold) {
  EXPECT_EQ(leases_.Request(Ask("t", 5), fleet_, now_).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(leases_.Request(Ask("t", 1, 8), fleet_, now_).status().code(),
            absl::StatusCode::kFailedPrecondition);
  LeaseSpec gpu = Ask("t");
  gpu.shapes[0].kind = "h200";
  EXPECT_EQ(leases_.Request(gpu, fleet_, now_).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(leases_.Request(Ask("t", 0), fleet_, now_).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(leases_.size(), 0u);
}

TEST_F(LeasesTest, UnhealthySlicesAreNotPlacedButStayWithTheirLease) {
  const uint64_t held = Queue(Ask("t"));
  leases_.Place(fleet_, now_);
  ASSERT_EQ(Slices(held), std::vector<int>{0});
  fleet_.mutable_slices(0)->set_healthy(false);
  fleet_.mutable_slices(1)->set_healthy(false);
  const uint64_t next = Queue(Ask("t"));
  leases_.Place(fleet_, now_);
  EXPECT_EQ(Slices(held), std::vector<int>{0});
  EXPECT_EQ(Slices(next), std::vector<int>{2});
}

TEST_F(LeasesTest, PreferredSlicesAreTakenFirst) {
  LeaseSpec spec = Ask("t", 2);
  spec.preferred = {3, 1};
  const uint64_t id = Queue(spec);
  leases_.Place(fleet_, now_);
  EXPECT_EQ(Slices(id), (std::vector<int>{1, 3}));
}

TEST_F(LeasesTest, SharesOrderTheQueueByUsagePerShare) {
  leases_ = Leases(LeaseOptions{.tenant_shares = {{"alice", 1}, {"bob", 2}}});
  const uint64_t a1 = Queue(Ask("alice"));
  const uint64_t b1 = Queue(Ask("bob"));
  leases_.Place(fleet_, now_);  // both placed: alice 1/1, bob 1/2
  ASSERT_FALSE(Slices(a1).empty());
  ASSERT_FALSE(Slices(b1).empty());
  fleet_ = Pool(2);  // no more room in a pool of two
  const uint64_t a2 = Queue(Ask("alice"));
  const uint64_t b2 = Queue(Ask("bob"));
  // Bob holds less per share, so his later request goes first.
  EXPECT_EQ(Position(b2), 1);
  EXPECT_EQ(Position(a2), 2);
  leases_.Release(b1);
  EXPECT_EQ(leases_.Place(fleet_, now_), std::vector<uint64_t>{b2});
  LeaseTable table = leases_.Snapshot(now_);
  ASSERT_EQ(table.queued_size(), 1);
  EXPECT_EQ(table.queued(0).lease_id(), a2);
  EXPECT_EQ(table.held_size(), 2);
}

TEST_F(LeasesTest, AMaximumHoldTakesALeaseBackOnlyWhileOthersWait) {
  leases_ = Leases(LeaseOptions{.max_hold = absl::Minutes(10)});
  fleet_ = Pool(1);
  const uint64_t first = Queue(Ask("t"));
  leases_.Place(fleet_, now_);
  now_ += absl::Hours(1);
  EXPECT_TRUE(leases_.Sweep(fleet_, now_).empty());  // nobody waits
  const uint64_t second = Queue(Ask("t"));
  EXPECT_EQ(leases_.Sweep(fleet_, now_), std::vector<uint64_t>{first});
  EXPECT_EQ(leases_.Get(first)->ended.code(), absl::StatusCode::kAborted);
  EXPECT_NE(leases_.Get(first)->ended.message().find("--lease_max_hold"), std::string::npos);
  EXPECT_EQ(leases_.Place(fleet_, now_), std::vector<uint64_t>{second});
  leases_.Release(first);  // the holder's stream ends; the slice stays with the second
  EXPECT_EQ(Slices(second), std::vector<int>{0});
}

TEST_F(LeasesTest, AHigherPriorityTakesTheSlicesItNeedsFromTheLowest) {
  leases_ = Leases(LeaseOptions{.tenant_priorities = {{"prod", 10}, {"research", 5}}});
  const uint64_t dev1 = Queue(Ask("dev"));
  const uint64_t research = Queue(Ask("research"));
  const uint64_t dev2 = Queue(Ask("dev"));
  const uint64_t dev3 = Queue(Ask("dev"));
  now_ += absl::Seconds(1);
  leases_.Place(fleet_, now_);
  ASSERT_EQ(leases_.Snapshot(now_).held_size(), 4);
  // Another dev session waits: same priority, nobody is preempted.
  const uint64_t dev4 = Queue(Ask("dev"));
  EXPECT_TRUE(leases_.Place(fleet_, now_).empty());
  // prod needs two slices: it takes them from dev, not research, and it goes before dev4.
  const uint64_t prod = Queue(Ask("prod", 2));
  EXPECT_EQ(Position(prod), 1);
  EXPECT_EQ(leases_.Place(fleet_, now_), std::vector<uint64_t>{prod});
  EXPECT_EQ(Slices(prod).size(), 2u);
  EXPECT_FALSE(Slices(research).empty());
  int revoked = 0;
  for (uint64_t id : {dev1, dev2, dev3}) {
    const std::string why(leases_.Get(id)->ended.message());
    if (why.empty()) continue;
    ++revoked;
    EXPECT_NE(why.find("preempted by a session of tenant 'prod' (priority 10 > 0"),
              std::string::npos)
        << why;
  }
  EXPECT_EQ(revoked, 2);
  EXPECT_EQ(Position(dev4), 1);
  // Nothing of lower priority would make room for a second prod request of 4 slices
  // (research's and prod's own cannot be taken): it waits.
  const uint64_t prod2 = Queue(Ask("prod", 4));
  EXPECT_TRUE(leases_.Place(fleet_, now_).empty());
  EXPECT_EQ(Position(prod2), 1);
}

TEST_F(LeasesTest, AMaximumHoldTakesBackOnlyWhatLetsTheHeadFit) {
  leases_ = Leases(LeaseOptions{.max_hold = absl::Minutes(10)});
  const uint64_t old1 = Queue(Ask("t"));
  const uint64_t old2 = Queue(Ask("t"));
  leases_.Place(fleet_, now_);
  now_ += absl::Minutes(5);
  const uint64_t young1 = Queue(Ask("t"));
  const uint64_t young2 = Queue(Ask("t"));
  leases_.Place(fleet_, now_);
  now_ += absl::Minutes(6);  // old1 and old2 are past the limit, the young ones not
  const uint64_t waiting = Queue(Ask("t"));
  // One slice lets the head fit: the most recently placed of the expired goes.
  EXPECT_EQ(leases_.Sweep(fleet_, now_).size(), 1u);
  EXPECT_EQ(leases_.Place(fleet_, now_), std::vector<uint64_t>{waiting});
  EXPECT_TRUE(leases_.Get(young1)->ended.ok());
  EXPECT_TRUE(leases_.Get(young2)->ended.ok());
  EXPECT_NE(leases_.Get(old1)->ended.ok(), leases_.Get(old2)->ended.ok());
  // A head that no expired lease could make room for takes nothing.
  LeaseSpec big = Ask("t", 4);
  Queue(big);
  EXPECT_TRUE(leases_.Sweep(fleet_, now_).empty());
}

TEST_F(LeasesTest, WithoutSharesTheQueueIsFirstComeFirstServed) {
  fleet_ = Pool(4);
  const uint64_t alice = Queue(Ask("alice", 3));
  leases_.Place(fleet_, now_);
  ASSERT_EQ(Slices(alice).size(), 3u);
  const uint64_t alice2 = Queue(Ask("alice", 2));
  const uint64_t bob = Queue(Ask("bob", 2));
  EXPECT_EQ(Position(alice2), 1);  // earlier, though alice holds more
  EXPECT_EQ(Position(bob), 2);
}

TEST_F(LeasesTest, AReclaimTakesItsSlicesBackAheadOfTheQueue) {
  // Two sessions hold slices 0 and 1; the RM restarted, so it knows none of it. Slice 1
  // comes back first: the reclaim of slice 0 must still get slice 0, not slice 1.
  fleet_.mutable_slices(0)->set_healthy(false);  // rejoining
  const uint64_t newcomer = Queue(Ask("t"));
  LeaseSpec reclaim0 = Ask("t");
  reclaim0.reclaim = true;
  reclaim0.preferred = {0};
  const uint64_t first = Queue(reclaim0);
  LeaseSpec reclaim1 = Ask("t");
  reclaim1.reclaim = true;
  reclaim1.preferred = {1};
  const uint64_t second = Queue(reclaim1);
  EXPECT_EQ(Position(first), 1);
  EXPECT_EQ(Position(newcomer), 3);
  leases_.Place(fleet_, now_);
  EXPECT_EQ(Slices(first), std::vector<int>{0});
  EXPECT_EQ(Slices(second), std::vector<int>{1});
  EXPECT_EQ(Slices(newcomer), std::vector<int>{2});
  // A reclaim of a slice someone else holds now ends at once.
  LeaseSpec late = Ask("t");
  late.reclaim = true;
  late.preferred = {2};
  const uint64_t lost = Queue(late);
  leases_.Place(fleet_, now_);
  EXPECT_EQ(leases_.Get(lost)->ended.code(), absl::StatusCode::kAborted);
  // Nor can a reclaim name slices the fleet does not have, or one slice twice.
  for (std::vector<int> bad : {std::vector<int>{9}, std::vector<int>{3, 3}}) {
    LeaseSpec odd = Ask("t", static_cast<int>(bad.size()));
    odd.reclaim = true;
    odd.preferred = bad;
    const uint64_t id = Queue(odd);
    leases_.Place(fleet_, now_);
    EXPECT_EQ(leases_.Get(id)->ended.code(), absl::StatusCode::kAborted);
  }
  // One that replaces the same owner's lease from before the break takes its slices.
  LeaseSpec again = Ask("t");
  again.reclaim = true;
  again.preferred = {2};
  again.replaces = newcomer;
  const uint64_t kept = Queue(again);
  leases_.Place(fleet_, now_);
  EXPECT_EQ(Slices(kept), std::vector<int>{2});
  EXPECT_FALSE(leases_.Get(newcomer).has_value());
}

TEST_F(LeasesTest, ARequestTheFleetCanNoLongerHoldEndsInsteadOfBlocking) {
  const uint64_t holder = Queue(Ask("t"));
  leases_.Place(fleet_, now_);
  const uint64_t all = Queue(Ask("t", 4));
  const uint64_t small = Queue(Ask("t"));
  EXPECT_TRUE(leases_.Place(fleet_, now_).empty());
  fleet_ = Pool(3);  // a host was forgotten
  EXPECT_EQ(leases_.Place(fleet_, now_), std::vector<uint64_t>{small});
  EXPECT_EQ(leases_.Get(all)->ended.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(Slices(holder).empty());
}

TEST(TenantPrioritiesTest, Parses) {
  auto priorities = ParseTenantPriorities("prod:10,dev:-1");
  SY_ASSERT_OK(priorities.status());
  EXPECT_EQ(priorities->at("dev"), -1);
  for (const char* bad : {"prod", "prod:1.5", ":1", "prod:x", "prod:99999999999"}) {
    EXPECT_EQ(ParseTenantPriorities(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(TenantSharesTest, Parses) {
  auto shares = ParseTenantShares("alice:1,bob:2.5");
  SY_ASSERT_OK(shares.status());
  EXPECT_EQ(shares->at("bob"), 2.5);
  for (const char* bad : {"alice", "alice:0", ":1", "alice:-1", "alice:x", "alice:1,"}) {
    EXPECT_EQ(ParseTenantShares(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace switchyard::rm
