#include "common/heap_trim.h"

#include <cstdlib>
#include <vector>

#include "gtest/gtest.h"

namespace switchyard {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1000);

HeapTrimPolicy::Options Options() {
  return {.min_freed = 10, .quiet = absl::Seconds(2), .min_interval = absl::Seconds(30)};
}

TEST(HeapTrimPolicyTest, TrimsOnceIdleAfterEnoughWasFreed) {
  HeapTrimPolicy policy(Options());
  EXPECT_FALSE(policy.Due(kStart, 100, 0));                     // first sight of work
  EXPECT_FALSE(policy.Due(kStart + absl::Seconds(5), 100, 9));  // too little freed
  EXPECT_TRUE(policy.Due(kStart + absl::Seconds(6), 100, 10));  // idle since kStart
  policy.Trimmed(kStart + absl::Seconds(6), 10);
  EXPECT_FALSE(policy.Due(kStart + absl::Seconds(7), 100, 10));  // nothing freed since
}

TEST(HeapTrimPolicyTest, WaitsForTheWorkToStop) {
  HeapTrimPolicy policy(Options());
  absl::Time now = kStart;
  for (int64_t work = 0; work < 10; ++work, now += absl::Seconds(1)) {
    EXPECT_FALSE(policy.Due(now, work, 50)) << work;  // busy: never in the middle of work
  }
  EXPECT_FALSE(policy.Due(now, 9, 50));                    // 1 s quiet
  EXPECT_TRUE(policy.Due(now + absl::Seconds(1), 9, 50));  // 2 s quiet
}

TEST(HeapTrimPolicyTest, TrimsAtMostOncePerInterval) {
  HeapTrimPolicy policy(Options());
  policy.Due(kStart, 1, 0);
  ASSERT_TRUE(policy.Due(kStart + absl::Seconds(2), 1, 10));
  policy.Trimmed(kStart + absl::Seconds(2), 10);
  EXPECT_FALSE(policy.Due(kStart + absl::Seconds(31), 1, 100));
  EXPECT_TRUE(policy.Due(kStart + absl::Seconds(32), 1, 100));
}

TEST(HeapTrimTest, FreedSmallAllocationsGoBack) {
#ifdef SWITCHYARD_SANITIZED
  GTEST_SKIP() << "a sanitizer's allocator keeps freed memory itself; malloc_trim is glibc's";
#endif
  // 256 MiB in small blocks, all freed: glibc keeps them in its bins until a trim.
  std::vector<void*> blocks(1 << 20);
  for (void*& block : blocks) {
    block = std::malloc(256);
    static_cast<volatile char*>(block)[0] = 1;
  }
  void* last = std::malloc(256);  // above the others: the heap's top stays
  // The compiler may not pair each malloc with its free and drop both.
  asm volatile("" : : "r"(blocks.data()), "r"(last) : "memory");
  for (void* block : blocks) std::free(block);
  EXPECT_GT(TrimHeap(), int64_t{128} << 20);
  std::free(last);
}

}  // namespace
}  // namespace switchyard
