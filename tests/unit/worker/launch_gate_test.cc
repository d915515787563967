#include "worker/launch_gate.h"

#include <string>

#include "gtest/gtest.h"

namespace switchyard::worker {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

FairShare::Request Plain(const std::string& flow, uint64_t program = 1) {
  FairShare::Request request;
  request.flow = flow;
  request.program = program;
  request.devices = {0};
  return request;
}

FairShare::Request InOrder(const std::string& flow) {
  FairShare::Request request = Plain(flow);
  request.in_order = true;
  return request;
}

// Hands `ticket` over if it may go: what the executor does once its turn comes.
bool Go(LaunchGate& gate, uint64_t ticket, absl::Time now) {
  if (!gate.MayStart(ticket, now)) return false;
  gate.Start(ticket, now);
  gate.HandedOver(ticket);
  return true;
}

TEST(LaunchGateTest, AFlowAloneKeepsTheWholeWindow) {
  // Holding a lone flow back would only make its chain of launches queue behind itself.
  LaunchGate gate({.host_devices = true, .window = 8});
  for (int i = 0; i < 8; ++i) {
    const uint64_t ticket = gate.Arrive(Plain("a"), false);
    EXPECT_TRUE(Go(gate, ticket, kT0)) << i;
  }
  EXPECT_EQ(gate.in_flight(), 8);
}

TEST(LaunchGateTest, TheFullWindowOpensOnceHalfOfItIsDone) {
  // A queue of dependent launches costs a waiting thread one wakeup per half window.
  LaunchGate gate({.host_devices = false, .window = 4});
  uint64_t tickets[4];
  for (uint64_t& ticket : tickets) {
    ticket = gate.Arrive(Plain("a"), false);
    ASSERT_TRUE(Go(gate, ticket, kT0));
  }
  const uint64_t fifth = gate.Arrive(Plain("a"), false);
  EXPECT_FALSE(gate.MayStart(fifth, kT0));
  gate.Finish(tickets[0], kT0 + absl::Milliseconds(1));
  EXPECT_FALSE(gate.MayStart(fifth, kT0 + absl::Milliseconds(1)));  // 3 of 4: still full
  gate.Finish(tickets[1], kT0 + absl::Milliseconds(2));
  EXPECT_TRUE(gate.MayStart(fifth, kT0 + absl::Milliseconds(2)));
}

TEST(LaunchGateTest, OneHandoverAtATime) {
  LaunchGate gate({.host_devices = false});
  const uint64_t first = gate.Arrive(Plain("a"), false);
  const uint64_t second = gate.Arrive(Plain("a"), false);
  ASSERT_TRUE(gate.MayStart(first, kT0));
  gate.Start(first, kT0);
  EXPECT_FALSE(gate.MayStart(second, kT0));  // the plugin's order is the handover order
  gate.Abandon(first);                       // e.g. its session was cancelled meanwhile
  EXPECT_TRUE(gate.MayStart(second, kT0));
  EXPECT_EQ(gate.in_flight(), 0);
}

TEST(LaunchGateTest, OnHostDevicesCompetingFlowsRunTwoPlainLaunchesAtATime) {
  // The CPU client would run any number side by side in no fair order; one at a time
  // idled the device for a wake-up between launches.
  LaunchGate gate({.host_devices = true});
  const uint64_t a1 = gate.Arrive(Plain("a", 1), false);
  const uint64_t b1 = gate.Arrive(Plain("b", 2), false);
  ASSERT_TRUE(Go(gate, a1, kT0));
  ASSERT_TRUE(Go(gate, b1, kT0));
  const uint64_t a2 = gate.Arrive(Plain("a", 1), false);
  EXPECT_FALSE(gate.MayStart(a2, kT0));
  gate.Finish(b1, kT0 + absl::Microseconds(300));
  EXPECT_TRUE(gate.MayStart(a2, kT0 + absl::Microseconds(300)));
}

TEST(LaunchGateTest, OnGpusCompetingFlowsAreHeldOnlyByQueuedDeviceTime) {
  // A device serves its launches in order: what matters is how much of another's work
  // a newcomer finds queued ahead of it.
  LaunchGate gate({.host_devices = false, .queue = absl::Milliseconds(10)});
  // Teach the gate what program 1 costs: 20 ms a launch.
  const uint64_t warm = gate.Arrive(Plain("a", 1), false);
  ASSERT_TRUE(Go(gate, warm, kT0));
  gate.Finish(warm, kT0 + absl::Milliseconds(20));
  absl::Time now = kT0 + absl::Milliseconds(20);
  const uint64_t a1 = gate.Arrive(Plain("a", 1), false);
  const uint64_t b1 = gate.Arrive(Plain("b", 1), false);
  ASSERT_TRUE(Go(gate, b1, now));  // first: "a" was served the warm-up launch
  ASSERT_TRUE(Go(gate, a1, now));  // two go regardless
  const uint64_t a2 = gate.Arrive(Plain("a", 1), false);
  EXPECT_FALSE(gate.MayStart(a2, now));  // 40 ms queued, past 10
  gate.Finish(a1, now + absl::Milliseconds(20));
  gate.Finish(b1, now + absl::Milliseconds(40));
  EXPECT_TRUE(gate.MayStart(a2, now + absl::Milliseconds(40)));
}

TEST(LaunchGateTest, InOrderLaunchesGoFirstComeAndAreNeverHeldForShares) {
  // A multi-host part waits in a collective for its peers, which start in arrival order.
  LaunchGate gate({.host_devices = true});
  const uint64_t plain = gate.Arrive(Plain("a"), false);
  const uint64_t first = gate.Arrive(InOrder("b"), false);
  const uint64_t second = gate.Arrive(InOrder("c"), false);
  EXPECT_FALSE(gate.MayStart(plain, kT0));
  EXPECT_FALSE(gate.MayStart(second, kT0));
  ASSERT_TRUE(Go(gate, first, kT0));
  ASSERT_TRUE(Go(gate, second, kT0));
  // Three flows compete and two launches are in flight; in-order ones still go.
  const uint64_t third = gate.Arrive(InOrder("b"), false);
  EXPECT_TRUE(Go(gate, third, kT0));
  // They take no place of the plain launches, which may still go two at a time.
  EXPECT_TRUE(gate.MayStart(plain, kT0));
}

TEST(LaunchGateTest, OnHostDevicesAMultiDeviceLaunchWaitsForThePreviousOne) {
  // The CPU client's shared pool can deadlock two multi-device launches in a collective.
  LaunchGate cpu({.host_devices = true});
  const uint64_t first = cpu.Arrive(Plain("a"), true);
  ASSERT_TRUE(Go(cpu, first, kT0));
  const uint64_t second = cpu.Arrive(Plain("a"), true);
  EXPECT_FALSE(cpu.MayStart(second, kT0));
  cpu.Finish(first, kT0 + absl::Milliseconds(1));
  EXPECT_TRUE(cpu.MayStart(second, kT0 + absl::Milliseconds(1)));

  LaunchGate gpu({.host_devices = false});
  ASSERT_TRUE(Go(gpu, gpu.Arrive(Plain("a"), true), kT0));
  EXPECT_TRUE(gpu.MayStart(gpu.Arrive(Plain("a"), true), kT0));
}

TEST(LaunchGateTest, AnUnknownTicketNeverGoesAndFinishesAsNothing) {
  LaunchGate gate({});
  EXPECT_FALSE(gate.MayStart(42, kT0));
  EXPECT_EQ(gate.Finish(42, kT0), 0);
  EXPECT_EQ(gate.in_flight(), 0);
}

}  // namespace
}  // namespace switchyard::worker
