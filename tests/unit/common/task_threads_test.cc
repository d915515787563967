#include "common/task_threads.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace switchyard {
namespace {

TEST(TaskThreadsTest, BlockingTasksRunSideBySideUpToTheLimitThenOnTheCaller) {
  TaskThreads threads(2, "sy-test");
  absl::Notification release;
  std::atomic<int> started{0};
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> ran_on_caller{false};
  for (int i = 0; i < 2; ++i) {
    threads.Run([&] {
      ++started;
      release.WaitForNotification();
    });
  }
  for (int i = 0; i < 500 && started.load() < 2; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(started.load(), 2);  // neither waited for the other
  // Both threads busy, at the limit: the next task runs here, now.
  threads.Run([&] { ran_on_caller = std::this_thread::get_id() == caller; });
  EXPECT_TRUE(ran_on_caller.load());
  release.Notify();
  threads.Stop();
}

TEST(TaskThreadsTest, IdleThreadsTakeTheNextTasksAndStopRunsWhatIsQueued) {
  TaskThreads threads(4, "sy-test");
  std::atomic<int> done{0};
  for (int i = 0; i < 100; ++i) threads.Run([&] { ++done; });
  threads.Stop();
  EXPECT_EQ(done.load(), 100);
  threads.Run([&] { ++done; });  // after Stop: on the caller
  EXPECT_EQ(done.load(), 101);
}

}  // namespace
}  // namespace switchyard
