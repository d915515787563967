#include "common/ordered_writer.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace switchyard {
namespace {

// Records what was written and on which thread.
struct Sink {
  absl::Mutex mutex;
  std::vector<std::string> written ABSL_GUARDED_BY(mutex);
  std::vector<std::thread::id> threads ABSL_GUARDED_BY(mutex);
  bool Write(const std::string& message) {
    absl::MutexLock lock(&mutex);
    written.push_back(message);
    threads.push_back(std::this_thread::get_id());
    return message != "fail";
  }
  bool Has(size_t n) {
    absl::MutexLock lock(&mutex);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) { return written.size() >= n; };
    return mutex.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
  }
};

TEST(OrderedWriterTest, ASenderClaimsAnIdleStreamAndWritesOnItsOwnThread) {
  Sink sink;
  OrderedWriter<std::string> writer([&](const std::string& m) { return sink.Write(m); }, "test");
  bool claimed = false;
  ASSERT_TRUE(writer.Post("a", &claimed));
  ASSERT_TRUE(claimed);
  // Posted meanwhile by others: queued behind the claim, not written by the writer's
  // thread ahead of "a".
  bool second = true;
  ASSERT_TRUE(writer.Post("b", &second));
  EXPECT_FALSE(second);
  ASSERT_TRUE(writer.Post("c"));
  writer.WriteClaimed(/*limit=*/2);
  ASSERT_TRUE(sink.Has(3));  // the third by the writer's thread, after the limit
  absl::MutexLock lock(&sink.mutex);
  EXPECT_EQ(sink.written, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(sink.threads[0], std::this_thread::get_id());
  EXPECT_EQ(sink.threads[1], std::this_thread::get_id());
  EXPECT_NE(sink.threads[2], std::this_thread::get_id());
}

TEST(OrderedWriterTest, NoClaimWhileAWriteIsInProgress) {
  absl::Notification entered, release;
  OrderedWriter<std::string> writer(
      [&](const std::string& m) {
        if (m == "slow") {
          entered.Notify();
          release.WaitForNotification();
        }
        return true;
      },
      "test");
  ASSERT_TRUE(writer.Post("slow"));
  entered.WaitForNotification();
  bool claimed = true;
  ASSERT_TRUE(writer.Post("next", &claimed));
  EXPECT_FALSE(claimed);  // the writer's thread takes it after "slow"
  release.Notify();
  EXPECT_TRUE(writer.AwaitIdle(absl::Seconds(10)));
}

TEST(OrderedWriterTest, AFailedClaimedWriteFailsWhatFollows) {
  Sink sink;
  OrderedWriter<std::string> writer([&](const std::string& m) { return sink.Write(m); }, "test");
  bool claimed = false;
  ASSERT_TRUE(writer.Post("fail", &claimed));
  ASSERT_TRUE(claimed);
  writer.WriteClaimed(4);
  EXPECT_FALSE(writer.Post("after"));
}

TEST(OrderedWriterTest, CloseWaitsForAClaimThatHasNotWrittenYet) {
  Sink sink;
  auto writer = std::make_shared<OrderedWriter<std::string>>(
      [&](const std::string& m) { return sink.Write(m); }, "test");
  bool claimed = false;
  ASSERT_TRUE(writer->Post("a", &claimed));
  ASSERT_TRUE(claimed);
  std::thread closer([writer] { writer->Close(); });
  // Close has begun once the writer refuses messages (it drops those queued before).
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (writer->Post("early") && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_FALSE(writer->Post("late"));
  writer->WriteClaimed(4);  // finds the writer closed: writes nothing, lets Close return
  closer.join();
  absl::MutexLock lock(&sink.mutex);
  EXPECT_TRUE(sink.written.empty());
}

}  // namespace
}  // namespace switchyard
