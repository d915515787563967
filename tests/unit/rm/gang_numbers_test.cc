#include "rm/gang_numbers.h"

#include "gtest/gtest.h"

#include <vector>

namespace switchyard::rm {
namespace {

using Numbers = std::vector<uint64_t>;
const GangNumbers::HostKey kA{0, 0};
const GangNumbers::HostKey kB{0, 1};
const GangNumbers::HostKey kC{1, 0};

TEST(GangNumbersTest, LaunchesSharingHostsAreNumberedInOneOrderOnEach) {
  GangNumbers gangs(7, 100);
  EXPECT_EQ(gangs.sequencer(), 7u);
  EXPECT_EQ(gangs.Number(1, 1, {kA, kB}), (Numbers{1, 1}));
  EXPECT_EQ(gangs.Number(2, 5, {kB, kC}), (Numbers{2, 1}));
  EXPECT_EQ(gangs.Number(2, 5, {kA, kB, kC}), (Numbers{2, 3, 2}));
  EXPECT_EQ(gangs.Number(1, 1, {kC}), (Numbers{3}));
  EXPECT_EQ(gangs.kept(), 8u);
  EXPECT_EQ(gangs.NextLaunchId(), 1);
  EXPECT_EQ(gangs.NextLaunchId(), 2);
}

TEST(GangNumbersTest, NumbersOfAProxyOrSessionThatEndedAreVoidUnlessPassed) {
  GangNumbers gangs(7, 100);
  gangs.Number(1, 1, {kA, kB});  // A1 B1
  gangs.Number(1, 2, {kA, kB});  // A2 B2
  gangs.Number(2, 1, {kA, kB});  // A3 B3 (another proxy's session 1)
  gangs.Number(1, 1, {kA});      // A4
  EXPECT_EQ(gangs.Voids(kA, 1, 4), Numbers{});
  gangs.SessionEnded(1, 1);
  EXPECT_EQ(gangs.Voids(kA, 1, 4), (Numbers{1, 4}));
  EXPECT_EQ(gangs.Voids(kB, 1, 3), (Numbers{1}));
  gangs.ProxyGone(2);
  EXPECT_EQ(gangs.Voids(kA, 2, 4), (Numbers{3, 4}));
  // Numbers after the end are not void: a proxy whose watch reconnects goes on.
  EXPECT_EQ(gangs.Number(2, 1, {kA}), (Numbers{5}));
  EXPECT_EQ(gangs.Voids(kA, 5, 5), Numbers{});
  // Not given yet: not void.
  EXPECT_EQ(gangs.Voids(kA, 6, 9), Numbers{});
  EXPECT_EQ(gangs.Voids(kC, 1, 9), Numbers{});
  EXPECT_EQ(gangs.Voids(kA, 3, 2), Numbers{});
}

TEST(GangNumbersTest, WhatAHostPassedIsForgottenAndCountsAsVoidIfAskedAgain) {
  GangNumbers gangs(7, 100);
  for (int i = 0; i < 5; ++i) gangs.Number(1, 1, {kA, kB});
  gangs.Passed(kA, 3);
  EXPECT_EQ(gangs.kept(), 7u);
  EXPECT_EQ(gangs.Voids(kA, 1, 5), (Numbers{1, 2, 3}));
  // A report past what was given (a host of an earlier RM process) forgets no more.
  gangs.Passed(kB, 1000);
  EXPECT_EQ(gangs.kept(), 2u);
  EXPECT_EQ(gangs.Number(1, 1, {kB}), (Numbers{6}));
  EXPECT_EQ(gangs.Voids(kB, 6, 6), Numbers{});
  gangs.Passed({9, 9}, 5);  // a host never numbered
  EXPECT_EQ(gangs.kept(), 3u);
}

TEST(GangNumbersTest, AHostThatNeverReportsKeepsAtMostTheBound) {
  GangNumbers gangs(7, 4);
  for (int i = 0; i < 10; ++i) gangs.Number(1, 1, {kA});
  EXPECT_EQ(gangs.kept(), 4u);
  // The forgotten ones are void to whoever still waits for them.
  EXPECT_EQ(gangs.Voids(kA, 1, 10), (Numbers{1, 2, 3, 4, 5, 6}));
}

TEST(GangNumbersTest, AProxyVoidsOnlyItsSessionsOwnNumbers) {
  GangNumbers gangs(7, 100);
  gangs.Number(1, 1, {kA, kB});           // A1 B1
  EXPECT_FALSE(gangs.Void(kA, 1, 2, 1));  // another proxy's session 1
  EXPECT_FALSE(gangs.Void(kA, 1, 1, 2));  // another session
  EXPECT_FALSE(gangs.Void(kA, 2, 1, 1));  // not given
  EXPECT_FALSE(gangs.Void(kC, 1, 1, 1));  // no such host
  EXPECT_TRUE(gangs.Void(kA, 1, 1, 1));
  EXPECT_EQ(gangs.Voids(kA, 1, 1), (Numbers{1}));
  EXPECT_EQ(gangs.Voids(kB, 1, 1), Numbers{});
}

TEST(GangNumbersTest, AHostsNewProcessStartsAfterWhatItsPreviousOneWasGiven) {
  GangNumbers gangs(7, 100);
  EXPECT_EQ(gangs.Restarted(kA), 1u);  // its first registration
  gangs.Number(1, 1, {kA, kB});
  gangs.Number(1, 1, {kA, kB});
  EXPECT_EQ(gangs.Restarted(kA), 3u);
  EXPECT_EQ(gangs.Voids(kA, 1, 2), (Numbers{1, 2}));
  EXPECT_EQ(gangs.Number(1, 1, {kA, kB}), (Numbers{3, 3}));
  EXPECT_EQ(gangs.Voids(kB, 1, 3), Numbers{});
}

}  // namespace
}  // namespace switchyard::rm
