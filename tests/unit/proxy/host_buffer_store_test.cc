#include "proxy/host_buffer_store.h"

#include <thread>

#include "gtest/gtest.h"

namespace switchyard::proxy {
namespace {

TEST(HostBufferStoreTest, StoreLookupDelete) {
  HostBufferStore store;
  ASSERT_TRUE(store.Store(1, "abc").ok());
  EXPECT_EQ(store.Store(1, "x").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(**store.Lookup(1, absl::ZeroDuration()), "abc");
  EXPECT_EQ(store.bytes(), 3);
  EXPECT_TRUE(store.Delete(1).ok());
  EXPECT_EQ(store.Delete(1).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.Lookup(1, absl::ZeroDuration()).status().code(), absl::StatusCode::kNotFound);
}

TEST(HostBufferStoreTest, LookupWaitsForALateUpload) {
  HostBufferStore store;
  std::thread uploader([&] {
    absl::SleepFor(absl::Milliseconds(50));
    (void)store.Store(9, "late");
  });
  auto data = store.Lookup(9, absl::Seconds(10));
  uploader.join();
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(**data, "late");
}

TEST(HostBufferStoreTest, CancelledAndShutdownEndTheWait) {
  HostBufferStore store;
  EXPECT_EQ(store.Lookup(5, absl::Seconds(30), [] { return true; }).status().code(),
            absl::StatusCode::kCancelled);
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(50));
    store.Shutdown();
  });
  EXPECT_EQ(store.Lookup(5, absl::Seconds(30)).status().code(), absl::StatusCode::kCancelled);
  stopper.join();
  EXPECT_EQ(store.Store(6, "x").code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace switchyard::proxy
