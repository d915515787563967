#include "worker/stream_progress.h"

#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace switchyard::worker {
namespace {

constexpr absl::Duration kLong = absl::Seconds(30);

TEST(StreamProgressTest, DoneOperationsAnswerAtOnce) {
  StreamProgress progress;
  progress.Open(5);
  progress.Advance(5, 3);
  EXPECT_TRUE(progress.WaitFor(5, 1, absl::Now() + kLong, kLong, nullptr).ok());
  EXPECT_TRUE(progress.WaitFor(5, 3, absl::Now() + kLong, kLong, nullptr).ok());
}

TEST(StreamProgressTest, WaitsUntilTheStreamGetsThere) {
  StreamProgress progress;
  progress.Open(5);
  std::thread stream([&] {
    absl::SleepFor(absl::Milliseconds(50));
    progress.Advance(5, 1);
    absl::SleepFor(absl::Milliseconds(50));
    progress.Advance(5, 2);
  });
  const absl::Time start = absl::Now();
  EXPECT_TRUE(progress.WaitFor(5, 2, absl::Now() + kLong, kLong, nullptr).ok());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(90));
  stream.join();
}

TEST(StreamProgressTest, AStreamThatEndsFirstFailsTheWaitAtOnce) {
  StreamProgress progress;
  progress.Open(5);
  progress.Advance(5, 1);
  std::thread stream([&] {
    absl::SleepFor(absl::Milliseconds(50));
    progress.Close(5);
  });
  const absl::Time start = absl::Now();
  absl::Status status = progress.WaitFor(5, 2, absl::Now() + kLong, kLong, nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  stream.join();
  // Remembered after it ended: later reads of what it did make still pass.
  EXPECT_TRUE(progress.WaitFor(5, 1, absl::Now() + kLong, kLong, nullptr).ok());
}

TEST(StreamProgressTest, AnUnknownStreamIsNotFoundAfterTheWait) {
  StreamProgress progress;
  absl::Status status =
      progress.WaitFor(99, 1, absl::Now() + kLong, absl::Milliseconds(100), nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
}

TEST(StreamProgressTest, AReadMayOvertakeTheStreamOpening) {
  StreamProgress progress;
  std::thread stream([&] {
    absl::SleepFor(absl::Milliseconds(50));
    progress.Open(5);
    progress.Advance(5, 1);
  });
  EXPECT_TRUE(progress.WaitFor(5, 1, absl::Now() + kLong, kLong, nullptr).ok());
  stream.join();
}

TEST(StreamProgressTest, DeadlinesAndCancellationEndTheWait) {
  StreamProgress progress;
  progress.Open(5);
  EXPECT_EQ(progress.WaitFor(5, 1, absl::Now() + absl::Milliseconds(50), kLong, nullptr).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(progress.WaitFor(5, 1, absl::Now() + kLong, kLong, [] { return true; }).code(),
            absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace switchyard::worker
