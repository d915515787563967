#include "worker/fair_share.h"

#include <cmath>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace switchyard::worker {
namespace {

struct Tenant {
  std::string name;
  double share;
  absl::Duration cost;  // device time of each of its launches
};

// Every tenant always has one launch waiting (one operation stream each, never idle);
// one device serves launches in the order they go, `window` of them queued at once.
// Returns the device seconds each was served over `total` of device time.
std::map<std::string, double> Serve(FairShare& fair, const std::vector<Tenant>& tenants,
                                    absl::Duration total, int window = 1) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  absl::Time now = t0;
  std::map<uint64_t, size_t> waiting;  // launch -> tenant
  auto arrive = [&](size_t t) {
    FairShare::Request request;
    request.flow = request.account = tenants[t].name;
    request.share = tenants[t].share;
    request.program = t + 1;
    request.devices = {0};
    waiting[fair.Arrive(request)] = t;
  };
  for (size_t t = 0; t < tenants.size(); ++t) arrive(t);
  struct Queued {
    uint64_t id;
    absl::Time done;
  };
  std::deque<Queued> device;
  while (now - t0 < total) {
    while (static_cast<int>(device.size()) < window) {
      const uint64_t id = fair.Next();
      const size_t t = waiting.at(id);
      waiting.erase(id);
      fair.Start(id, now);
      const absl::Time from = device.empty() ? now : device.back().done;
      device.push_back({id, from + tenants[t].cost});
      arrive(t);  // its stream hands over the next launch at once
    }
    now = device.front().done;
    fair.Finish(device.front().id, now);
    device.pop_front();
  }
  return fair.served();
}

double Total(const std::map<std::string, double>& served) {
  double total = 0;
  for (const auto& [name, seconds] : served) total += seconds;
  return total;
}

TEST(FairShareTest, EqualSharesGetEqualTime) {
  FairShare fair;
  auto served = Serve(fair,
                      {{"a", 1, absl::Milliseconds(1)},
                       {"b", 1, absl::Milliseconds(1)},
                       {"c", 1, absl::Milliseconds(1)},
                       {"d", 1, absl::Milliseconds(1)}},
                      absl::Seconds(10));
  for (const auto& [name, seconds] : served) {
    EXPECT_NEAR(seconds / Total(served), 0.25, 0.01) << name;
  }
}

TEST(FairShareTest, TimeFollowsTheSharesWithTheDeviceQueueFull) {
  for (int window : {1, 4, 32}) {
    FairShare fair;
    auto served = Serve(fair,
                        {{"a", 1, absl::Milliseconds(1)},
                         {"b", 2, absl::Milliseconds(1)},
                         {"c", 4, absl::Milliseconds(1)},
                         {"d", 8, absl::Milliseconds(1)}},
                        absl::Seconds(30), window);
    const double total = Total(served);
    EXPECT_NEAR(served["a"] / total, 1.0 / 15, 0.01) << "window " << window;
    EXPECT_NEAR(served["b"] / total, 2.0 / 15, 0.01) << "window " << window;
    EXPECT_NEAR(served["c"] / total, 4.0 / 15, 0.01) << "window " << window;
    EXPECT_NEAR(served["d"] / total, 8.0 / 15, 0.01) << "window " << window;
  }
}

TEST(FairShareTest, ShortProgramsDoNotLoseToLongOnes) {
  // Device time, not launches: the tenant with 8x longer programs gets the same time.
  FairShare fair;
  auto served =
      Serve(fair, {{"short", 1, absl::Microseconds(250)}, {"long", 1, absl::Milliseconds(2)}},
            absl::Seconds(20));
  EXPECT_NEAR(served["short"] / Total(served), 0.5, 0.02);
}

TEST(FairShareTest, AnIdleTenantBanksLittle) {
  FairShare fair;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  FairShare::Request a{"a", "a", 1, 1, {0}};
  // `a` alone for a second: `b`, idle meanwhile, cannot claim that second afterwards.
  absl::Time now = t0;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t id = fair.Arrive(a);
    fair.Start(fair.Next(), now);
    now += absl::Milliseconds(1);
    fair.Finish(id, now);
  }
  // Now `b` comes, also backlogged: it goes first for at most the kLag a flow may lag
  // (plus its first launch, not yet measured), then they alternate.
  FairShare::Request b{"b", "b", 1, 2, {0}};
  uint64_t next_a = fair.Arrive(a);
  uint64_t next_b = fair.Arrive(b);
  int a_runs = 0, b_first = 0;
  const int lag_launches = static_cast<int>(FairShare::kLag * 1000);  // of 1 ms each
  const int rounds = lag_launches + 40;
  for (int i = 0; i < rounds; ++i) {
    const uint64_t id = fair.Next();
    fair.Start(id, now);
    now += absl::Milliseconds(1);
    fair.Finish(id, now);
    if (id == next_a) {
      ++a_runs;
      next_a = fair.Arrive(a);
    } else {
      ASSERT_EQ(id, next_b);
      if (a_runs == 0) ++b_first;
      next_b = fair.Arrive(b);
    }
  }
  EXPECT_LE(b_first, lag_launches + 2);
  EXPECT_NEAR(a_runs, (rounds - b_first) / 2, 2);
}

TEST(FairShareTest, InOrderLaunchesGoFirstComeFirstServed) {
  FairShare fair;
  const absl::Time now = absl::FromUnixSeconds(1000);
  // `a` is far ahead of the virtual time: its ordinary launch waits for `b`'s.
  const uint64_t first = fair.Arrive({"a", "a", 1, 1, {0}});
  fair.Start(first, now);
  fair.Finish(first, now + absl::Seconds(1));
  const uint64_t b = fair.Arrive({"b", "b", 1, 2, {0}});
  const uint64_t ordinary = fair.Arrive({"a", "a", 1, 1, {0}});
  EXPECT_EQ(fair.Next(), b);
  // Multi-host parts are not in the fair order at all: the first come goes first,
  // whatever its flow has been served.
  EXPECT_EQ(fair.NextInOrder(), 0u);
  const uint64_t part = fair.Arrive({"a", "a", 1, 3, {0}, /*in_order=*/true});
  const uint64_t later = fair.Arrive({"b", "b", 1, 4, {0}, /*in_order=*/true});
  EXPECT_EQ(fair.NextInOrder(), part);
  EXPECT_EQ(fair.Next(), b);
  fair.Start(part, now + absl::Seconds(1));
  EXPECT_EQ(fair.NextInOrder(), later);
  fair.Withdraw(later);
  fair.Withdraw(ordinary);
  EXPECT_EQ(fair.NextInOrder(), 0u);
  EXPECT_EQ(fair.Next(), b);
}

TEST(FairShareTest, ADeletedProgramIsNotMeasuredAgain) {
  FairShare fair;
  const absl::Time now = absl::FromUnixSeconds(1000);
  const uint64_t id = fair.Arrive({"a", "a", 1, 7, {0}});
  fair.Start(id, now);
  fair.Forget(7);  // deleted while its launch runs
  fair.Finish(id, now + absl::Milliseconds(4));
  EXPECT_EQ(fair.Estimate(7), 0);
  EXPECT_DOUBLE_EQ(fair.served().at("a"), 0.004);  // still charged
}

TEST(FairShareTest, TheQueueIsTimePerDevice) {
  FairShare fair;
  const absl::Time now = absl::FromUnixSeconds(1000);
  uint64_t id = fair.Arrive({"a", "a", 1, 7, {0, 1, 2, 3}});
  fair.Start(id, now);
  fair.Finish(id, now + absl::Milliseconds(2));  // 8 device-ms
  id = fair.Arrive({"a", "a", 1, 7, {0, 1, 2, 3}});
  fair.Start(id, now + absl::Milliseconds(2));
  EXPECT_DOUBLE_EQ(fair.queued(), 0.002);  // keeps its devices 2 ms
  fair.Withdraw(id);
  EXPECT_EQ(fair.queued(), 0);
}

TEST(FairShareTest, EstimatesAreChargedAtArrivalAndCorrectedAtFinish) {
  FairShare fair;
  const absl::Time now = absl::FromUnixSeconds(1000);
  EXPECT_EQ(fair.Estimate(7), 0);
  uint64_t id = fair.Arrive({"a", "a", 1, 7, {0}});
  fair.Start(id, now);
  fair.Finish(id, now + absl::Milliseconds(4));
  EXPECT_DOUBLE_EQ(fair.Estimate(7), 0.004);
  id = fair.Arrive({"a", "a", 1, 7, {0}});
  fair.Start(id, now + absl::Milliseconds(4));
  fair.Finish(id, now + absl::Milliseconds(12));  // took 8 ms this time
  EXPECT_DOUBLE_EQ(fair.Estimate(7), 0.005);      // a quarter of the way there
  fair.Forget(7);
  EXPECT_EQ(fair.Estimate(7), 0);
}

TEST(FairShareTest, OverlappingLaunchesAreChargedTheirOwnPart) {
  FairShare fair;
  const absl::Time now = absl::FromUnixSeconds(1000);
  const uint64_t a = fair.Arrive({"a", "a", 1, 1, {0}});
  fair.Start(a, now);
  const uint64_t b = fair.Arrive({"b", "b", 1, 2, {0, 1}});
  fair.Start(b, now);
  fair.Finish(a, now + absl::Milliseconds(3));
  // `b` queued behind `a` on device 0: its own time there began when `a` finished;
  // it held two devices.
  EXPECT_DOUBLE_EQ(fair.Finish(b, now + absl::Milliseconds(5)), 0.004);
  EXPECT_DOUBLE_EQ(fair.served().at("a"), 0.003);
  EXPECT_DOUBLE_EQ(fair.served().at("b"), 0.004);
  EXPECT_DOUBLE_EQ(fair.busy().at(0), 0.005);
  EXPECT_DOUBLE_EQ(fair.busy().at(1), 0.002);
}

TEST(FairShareTest, ALaunchIsChargedFromWhenItsInputsAreReady) {
  FairShare fair;
  const absl::Time now = absl::FromUnixSeconds(1000);
  const uint64_t a = fair.Arrive({"a", "a", 1, 1, {0}});
  fair.Start(a, now);
  // Its input (a transfer) arrived 5 ms after the handover; the device ran it for 2 ms.
  EXPECT_DOUBLE_EQ(fair.Finish(a, now + absl::Milliseconds(7), now + absl::Milliseconds(5)), 0.002);
  EXPECT_DOUBLE_EQ(fair.busy().at(0), 0.002);
  // Inputs ready before the start change nothing; a time past the finish is taken as it.
  const uint64_t b = fair.Arrive({"b", "b", 1, 2, {0}});
  fair.Start(b, now + absl::Milliseconds(10));
  EXPECT_DOUBLE_EQ(fair.Finish(b, now + absl::Milliseconds(13), now), 0.003);
  const uint64_t c = fair.Arrive({"c", "c", 1, 3, {0}});
  fair.Start(c, now + absl::Milliseconds(20));
  EXPECT_DOUBLE_EQ(fair.Finish(c, now + absl::Milliseconds(21), now + absl::Seconds(1)), 0);
}

TEST(FairShareTest, WithdrawnLaunchesLeaveNothingBehind) {
  FairShare fair;
  const uint64_t a = fair.Arrive({"a", "a", 1, 1, {0}});
  const uint64_t b = fair.Arrive({"b", "b", 1, 2, {0}});
  EXPECT_EQ(fair.active_flows(), 2u);
  EXPECT_EQ(fair.waiting(), 2u);
  fair.Start(a, absl::FromUnixSeconds(1000));
  fair.Withdraw(a);
  fair.Withdraw(b);
  EXPECT_EQ(fair.active_flows(), 0u);
  EXPECT_EQ(fair.waiting(), 0u);
  EXPECT_EQ(fair.Next(), 0u);
  EXPECT_TRUE(fair.served().empty());
}

TEST(FairShareTest, AccountsAreBounded) {
  FairShare fair;
  const absl::Time now = absl::FromUnixSeconds(1000);
  for (int i = 0; i < 1100; ++i) {
    const std::string name = "t" + std::to_string(i);
    const uint64_t id = fair.Arrive({name, name, 1, 1, {0}});
    fair.Start(id, now);
    fair.Finish(id, now);
  }
  EXPECT_LE(fair.served().size(), 1025u);
  EXPECT_TRUE(fair.served().contains(FairShare::kOtherAccount));
}

TEST(FairShareTest, AFlowCompetesAMomentAfterItsLastLaunch) {
  FairShare fair;
  const absl::Time now = absl::FromUnixSeconds(1000);
  const uint64_t a = fair.Arrive({"a", "a", 1, 1, {0}});
  const uint64_t b = fair.Arrive({"b", "b", 1, 2, {0}});
  EXPECT_EQ(fair.Competing(now), 2u);
  fair.Start(a, now);
  fair.Finish(a, now + absl::Milliseconds(1));
  EXPECT_EQ(fair.active_flows(), 1u);
  EXPECT_EQ(fair.Competing(now + absl::Milliseconds(2)), 2u);  // `a` is between launches
  EXPECT_EQ(fair.Competing(now + absl::Milliseconds(1) + FairShare::kRecent * 2), 1u);
  fair.Withdraw(b);
  EXPECT_EQ(fair.Competing(now + absl::Seconds(1)), 0u);
}

TEST(FairShareTest, SharesAreKeptInRange) {
  FairShare fair;
  // NaN counts as 1; zero, tiny and infinite shares are clamped, so no tag becomes
  // infinite or NaN and every flow keeps being served.
  auto served = Serve(fair,
                      {{"nan", std::nan(""), absl::Milliseconds(1)},
                       {"one", 1, absl::Milliseconds(1)},
                       {"zero", 0, absl::Milliseconds(1)},
                       {"tiny", 1e-300, absl::Milliseconds(1)},
                       {"inf", INFINITY, absl::Milliseconds(1)}},
                      absl::Seconds(30));
  EXPECT_NEAR(served["nan"] / served["one"], 1, 0.05);
  EXPECT_GT(served["zero"], 0);
  EXPECT_GT(served["tiny"], 0);
  EXPECT_LT(served["inf"], Total(served));
  for (const auto& [name, seconds] : served) EXPECT_TRUE(std::isfinite(seconds)) << name;
}

}  // namespace
}  // namespace switchyard::worker
