#include "proxy/late_futures.h"

#include <optional>
#include <vector>

#include "gtest/gtest.h"

namespace switchyard::proxy {
namespace {

TEST(LateFuturesTest, ACheckBeforeTheResultIsAnsweredWhenItComes) {
  LateFutures futures;
  futures.Add(7);
  std::optional<absl::Status> answer;
  EXPECT_TRUE(futures.Check(7, [&](absl::Status status) { answer = status; }));
  EXPECT_FALSE(answer.has_value());
  futures.Resolve(7, absl::DataLossError("slice 1 lost"));
  ASSERT_TRUE(answer.has_value());
  EXPECT_TRUE(absl::IsDataLoss(*answer));
  // Checked once: gone now.
  EXPECT_FALSE(futures.Check(7, [](absl::Status) {}));
}

TEST(LateFuturesTest, ACheckAfterTheResultIsAnsweredAtOnce) {
  LateFutures futures;
  futures.Add(1);
  futures.Resolve(1, absl::OkStatus());
  futures.Resolve(1, absl::InternalError("a second result is ignored"));
  std::optional<absl::Status> answer;
  EXPECT_TRUE(futures.Check(1, [&](absl::Status status) { answer = status; }));
  ASSERT_TRUE(answer.has_value());
  EXPECT_TRUE(answer->ok());
}

TEST(LateFuturesTest, UnknownHandlesAreNotTheirsAndEndingAnswersWaiters) {
  LateFutures futures;
  EXPECT_FALSE(futures.Check(3, [](absl::Status) {}));
  futures.Resolve(3, absl::OkStatus());  // nothing there: ignored
  futures.Add(4);
  std::vector<absl::Status> answers;
  EXPECT_TRUE(futures.Check(4, [&](absl::Status status) { answers.push_back(status); }));
  std::optional<absl::Status> twice;
  EXPECT_TRUE(futures.Check(4, [&](absl::Status status) { twice = status; }));
  ASSERT_TRUE(twice.has_value());
  EXPECT_TRUE(absl::IsFailedPrecondition(*twice));
  futures.FailAll(absl::CancelledError("session ended"));
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_TRUE(absl::IsCancelled(answers[0]));
  futures.Resolve(4, absl::OkStatus());  // after the end: nobody waits
  EXPECT_EQ(answers.size(), 1u);
}

}  // namespace
}  // namespace switchyard::proxy
