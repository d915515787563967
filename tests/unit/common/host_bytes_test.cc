// Host buffers: aligned, and large ones reuse the memory of freed ones of about their
// size, within a bound.

#include "common/host_bytes.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "common/limits.h"
#include "gtest/gtest.h"

namespace switchyard {
namespace {

TEST(HostBytesTest, BuffersAreAlignedAndSmallOnesAreNotKept) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{4097}, size_t{3} << 20}) {
    HostBytes bytes(size);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(bytes.data()) % HostBytes::kAlignment, 0u) << size;
    EXPECT_EQ(bytes.size(), size);
  }
  const size_t kept = HostBytes::KeptBytes();
  { HostBytes small(4096); }
  EXPECT_EQ(HostBytes::KeptBytes(), kept);
}

TEST(HostBytesTest, AFreedLargeBufferServesTheNextOfAboutItsSize) {
  const size_t size = size_t{8} << 20;
  char* first;
  {
    auto bytes = HostBytes::Allocate(size);
    ASSERT_TRUE(bytes.ok());
    first = (*bytes)->data();
    std::memset(first, 7, size);  // its pages are there now
  }
  const size_t kept = HostBytes::KeptBytes();
  EXPECT_GE(kept, size);
  {
    // Slightly smaller: the same memory, writable end to end.
    HostBytes again(size - 4096);
    EXPECT_EQ(again.data(), first);
    std::memset(again.data(), 1, again.size());
    EXPECT_LT(HostBytes::KeptBytes(), kept);  // taken while in use
  }
  {
    // Much smaller: not that memory (it would waste most of it).
    HostBytes small(size / 4);
    EXPECT_NE(small.data(), first);
  }
}

TEST(HostBytesTest, ATransfersWorthIsKeptFromTheDataPlanesFloor) {
  // A model's weights moved in many arrays of 0.5-2 MiB: each buffer's memory serves the
  // next; below the floor malloc's own reuse is left alone.
  const size_t size = size_t(limits::kBulkMinBytes);
  char* first;
  {
    HostBytes bytes(size);
    first = bytes.data();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % HostBytes::kAlignment, 0u);
    std::memset(first, 7, size);
  }
  const size_t kept = HostBytes::KeptBytes();
  EXPECT_GE(kept, size);
  {
    HostBytes again(size);
    EXPECT_EQ(again.data(), first);
    std::memset(again.data(), 1, again.size());
  }
  { HostBytes below(size - 1); }
  EXPECT_EQ(HostBytes::KeptBytes(), kept);
}

TEST(HostBytesTest, WhatIsKeptIsBounded) {
  // More freed at once than the bound: the rest is unmapped.
  std::vector<std::unique_ptr<HostBytes>> many;
  const size_t each = size_t{64} << 20;
  for (int64_t i = 0; i * int64_t(each) < limits::kHostBytesKeptMax + 2 * int64_t(each); ++i) {
    many.push_back(std::make_unique<HostBytes>(each));
  }
  many.clear();
  EXPECT_LE(HostBytes::KeptBytes(), size_t(limits::kHostBytesKeptMax));
}

TEST(HostBytesTest, WhatIsKeptUnusedForAWhileIsUnmapped) {
  const absl::Duration idle = absl::Milliseconds(limits::kHostBytesKeptIdleMs);
  const absl::Time start = absl::Now();
  (void)HostBytes::ReleaseIdleKept(start + idle);  // nothing kept from before
  EXPECT_EQ(HostBytes::KeptBytes(), 0u);
  (void)std::make_unique<HostBytes>(size_t{16} << 20);  // kept when freed
  const size_t kept = HostBytes::KeptBytes();
  ASSERT_GT(kept, 0u);
  EXPECT_EQ(HostBytes::ReleaseIdleKept(start), 0u);  // just kept
  EXPECT_EQ(HostBytes::ReleaseIdleKept(absl::Now() + idle), kept);
  EXPECT_EQ(HostBytes::KeptBytes(), 0u);
}

}  // namespace
}  // namespace switchyard
