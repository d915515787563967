#include "rm/kv_store.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "gtest/gtest.h"

namespace switchyard::rm {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1000);

// Where a get's answer lands: nullopt until it comes.
struct Answer {
  std::optional<absl::StatusOr<std::string>> got;
  KvStore::GetDone Callback() {
    return [this](absl::StatusOr<std::string> value) {
      ASSERT_FALSE(got.has_value()) << "answered twice";
      got = std::move(value);
    };
  }
};

absl::StatusOr<std::string> GetNow(KvStore& kv, const std::string& key) {
  Answer answer;
  EXPECT_EQ(kv.Get(key, kStart, kStart, answer.Callback()), 0u);
  return *answer.got;
}

TEST(KvStoreTest, PutGetOverwrite) {
  KvStore kv;
  ASSERT_TRUE(kv.Put("slice/0/a", "1", false).ok());
  EXPECT_EQ(*GetNow(kv, "slice/0/a"), "1");
  EXPECT_EQ(kv.Put("slice/0/a", "2", false).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(kv.Put("slice/0/a", "2", true).ok());
  EXPECT_EQ(*GetNow(kv, "slice/0/a"), "2");
  EXPECT_EQ(kv.Put("", "x", false).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.Put("big", std::string(5 << 20, 'x'), false).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KvStoreTest, AWaitingGetIsAnsweredByThePutOfItsKeyOnly) {
  KvStore kv;
  Answer nccl, other;
  EXPECT_NE(kv.Get("nccl_id", kStart, kStart + absl::Seconds(10), nccl.Callback()), 0u);
  EXPECT_NE(kv.Get("other", kStart, kStart + absl::Seconds(10), other.Callback()), 0u);
  EXPECT_EQ(kv.waiting(), 2);
  ASSERT_TRUE(kv.Put("nccl_id", "clique", false).ok());
  ASSERT_TRUE(nccl.got.has_value());
  EXPECT_EQ(**nccl.got, "clique");
  EXPECT_FALSE(other.got.has_value());
  EXPECT_EQ(kv.waiting(), 1);
}

TEST(KvStoreTest, MissingKeysAndDeadlines) {
  KvStore kv;
  EXPECT_EQ(GetNow(kv, "nope").status().code(), absl::StatusCode::kNotFound);
  Answer late;
  kv.Get("nope", kStart, kStart + absl::Milliseconds(20), late.Callback());
  kv.Expire(kStart + absl::Milliseconds(19));
  EXPECT_FALSE(late.got.has_value());
  kv.Expire(kStart + absl::Milliseconds(20));
  ASSERT_TRUE(late.got.has_value());
  EXPECT_EQ(late.got->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(late.got->status().message().find("'nope' was not set within 20ms"), std::string::npos)
      << late.got->status();
  EXPECT_EQ(kv.waiting(), 0);
}

TEST(KvStoreTest, ACancelledGetIsNeverAnswered) {
  KvStore kv;
  Answer gone;
  const KvStore::WaitId id = kv.Get("k", kStart, kStart + absl::Seconds(1), gone.Callback());
  EXPECT_TRUE(kv.Cancel(id));
  EXPECT_FALSE(kv.Cancel(id));  // once
  ASSERT_TRUE(kv.Put("k", "v", false).ok());
  kv.Expire(kStart + absl::Seconds(2));
  EXPECT_FALSE(gone.got.has_value());
  // One answered already cannot be cancelled.
  Answer answered;
  const KvStore::WaitId later =
      kv.Get("k2", kStart, kStart + absl::Seconds(1), answered.Callback());
  ASSERT_TRUE(kv.Put("k2", "v", false).ok());
  EXPECT_FALSE(kv.Cancel(later));
  EXPECT_TRUE(answered.got.has_value());
}

TEST(KvStoreTest, WaitingGetsAreBounded) {
  KvStore kv;
  std::vector<Answer> answers(limits::kKvWaitersMax + 1);
  for (int64_t i = 0; i < limits::kKvWaitersMax; ++i) {
    kv.Get(absl::StrCat("k", i), kStart, kStart + absl::Seconds(1), answers[i].Callback());
  }
  Answer refused;
  EXPECT_EQ(kv.Get("one more", kStart, kStart + absl::Seconds(1), refused.Callback()), 0u);
  ASSERT_TRUE(refused.got.has_value());
  EXPECT_EQ(refused.got->status().code(), absl::StatusCode::kResourceExhausted);
  // A key already set is answered whatever waits.
  ASSERT_TRUE(kv.Put("set", "v", false).ok());
  EXPECT_EQ(*GetNow(kv, "set"), "v");
  kv.Expire(kStart + absl::Seconds(1));
  EXPECT_EQ(kv.waiting(), 0);
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
