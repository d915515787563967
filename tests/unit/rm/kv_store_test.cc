#include "rm/kv_store.h"

#include <thread>

#include "gtest/gtest.h"

namespace switchyard::rm {
namespace {

TEST(KvStoreTest, PutGetOverwrite) {
  KvStore kv;
  ASSERT_TRUE(kv.Put("slice/0/a", "1", false).ok());
  EXPECT_EQ(*kv.Get("slice/0/a", absl::ZeroDuration()), "1");
  EXPECT_EQ(kv.Put("slice/0/a", "2", false).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(kv.Put("slice/0/a", "2", true).ok());
  EXPECT_EQ(*kv.Get("slice/0/a", absl::ZeroDuration()), "2");
  EXPECT_EQ(kv.Put("", "x", false).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.Put("big", std::string(5 << 20, 'x'), false).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KvStoreTest, GetWaitsForAnotherHost) {
  KvStore kv;
  std::thread other([&] {
    absl::SleepFor(absl::Milliseconds(50));
    (void)kv.Put("nccl_id", "clique", false);
  });
  auto value = kv.Get("nccl_id", absl::Seconds(10));
  other.join();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "clique");
}

TEST(KvStoreTest, MissingKeys) {
  KvStore kv;
  EXPECT_EQ(kv.Get("nope", absl::ZeroDuration()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(kv.Get("nope", absl::Milliseconds(20)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace switchyard::rm
