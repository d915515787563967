// absl::Status copies shared between threads. Its reference count drops inside Debian's
// abseil, which ThreadSanitizer cannot see: in the TSan build (./dev tsan) this test fails
// with a reported race unless tests/sanitizers/tsan_absl_sync.cc makes the count visible.
// In other builds it checks only that the copies stay whole.

#include <atomic>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace switchyard {
namespace {

TEST(StatusAcrossThreadsTest, TheLastHolderFreesTheMessageAfterAnotherThreadReadIt) {
  absl::Mutex mutex;
  absl::Status shared = absl::DataLossError("a message long enough to live on the heap");
  std::atomic<bool> let_go{false};
  std::string read;
  std::thread reader([&] {
    absl::Status copy;
    {
      absl::MutexLock lock(&mutex);
      copy = shared;
    }
    read = std::string(copy.message());  // outside the lock, as a failed call reports it
    copy = absl::OkStatus();
    let_go.store(true, std::memory_order_relaxed);  // relaxed: orders nothing for TSan
  });
  while (!let_go.load(std::memory_order_relaxed)) std::this_thread::yield();
  {
    absl::MutexLock lock(&mutex);
    shared = absl::OkStatus();  // the last holder: frees the message here
  }
  reader.join();
  EXPECT_EQ(read, "a message long enough to live on the heap");
}

}  // namespace
}  // namespace switchyard
