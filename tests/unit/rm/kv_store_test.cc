#include "rm/kv_store.h"

#include <thread>

#include "absl/strings/str_cat.h"
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

TEST(KvStoreTest, IsBoundedInBytesAndKeys) {
  KvStore kv;
  const std::string value(4 << 20, 'x');
  absl::Status status;
  int puts = 0;
  while ((status = kv.Put(absl::StrCat("k", puts), value, false)).ok()) ++puts;
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_EQ(puts, 63);  // 63 x (4 MiB + key) fit in 256 MiB
  EXPECT_LE(kv.bytes(), int64_t{256} << 20);
  // Overwriting in place still works when full; a smaller value frees room.
  EXPECT_TRUE(kv.Put("k0", "small", true).ok());
  EXPECT_TRUE(kv.Put("another", value, false).ok());
}

}  // namespace
}  // namespace switchyard::rm
