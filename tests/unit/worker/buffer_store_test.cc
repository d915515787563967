#include "worker/buffer_store.h"

#include <memory>

#include <thread>

#include "gtest/gtest.h"

namespace switchyard::worker {
namespace {

TEST(BufferStoreTest, StringsAreHeldButNotHandedToDevices) {
  BufferStore store;
  ASSERT_TRUE(store.AddStrings(7, 3, {2}, {"a", "bc"}, /*owner=*/5).ok());
  EXPECT_EQ(store.AddStrings(7, 3, {1}, {"x"}).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store.AddStrings(0, 3, {1}, {"x"}).code(), absl::StatusCode::kInvalidArgument);
  // Programs, transfers and checkpoints read through Get: a clear refusal, never a null
  // device buffer.
  absl::Status refused = store.Get(7).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("string array"), std::string::npos) << refused;
  auto any = store.GetAny(7);
  ASSERT_TRUE(any.ok());
  EXPECT_TRUE((*any)->is_strings);
  EXPECT_EQ((*any)->strings, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ((*any)->dims, (std::vector<int64_t>{2}));
  EXPECT_EQ((*any)->device_id, 3);
  EXPECT_EQ(store.DeleteOwned(5), 1);
  EXPECT_EQ(store.GetAny(7).status().code(), absl::StatusCode::kNotFound);
}

TEST(BufferStoreTest, AStoredErrorIsWhatStringReadersGet) {
  BufferStore store;
  store.AddError(9, absl::UnknownError("Traceback: ValueError"));
  EXPECT_EQ(store.GetAny(9).status().message(), "Traceback: ValueError");
  EXPECT_EQ(store.Get(9).status().message(), "Traceback: ValueError");
}

TEST(BufferStoreTest, ReservationsCountAgainstTheBoundUntilTheyGo) {
  BufferStore store(/*max_bytes=*/100);
  absl::StatusOr<BufferStore::Reservation> first =
      store.Reserve(60, [] { return std::string("the outputs of a launch"); });
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<BufferStore::Reservation> refused =
      store.Reserve(50, [] { return std::string("an upload"); });
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("an upload would take 50 bytes"), std::string::npos);
  EXPECT_NE(refused.status().message().find("--max_buffer_bytes"), std::string::npos);
  {
    BufferStore::Reservation moved = *std::move(first);  // counted once, wherever it is
    EXPECT_FALSE(store.Reserve(50, [] { return std::string("an upload"); }).ok());
  }
  EXPECT_TRUE(store.Reserve(100, [] { return std::string("an upload"); }).ok());
  EXPECT_EQ(store.Reserve(-1, [] { return std::string("an upload"); }).status().code(),
            absl::StatusCode::kInvalidArgument);
  BufferStore unbounded;
  EXPECT_TRUE(unbounded.Reserve(int64_t{1} << 62, [] { return std::string("an upload"); }).ok());
}

TEST(BufferStoreTest, AReservationMayWaitForRoomBeingFreed) {
  // An upload's worker may get it just before the client's deletions, which travel on
  // another stream: it waits a moment for them.
  BufferStore store(/*max_bytes=*/100);
  auto held = std::make_unique<BufferStore::Reservation>(
      *store.Reserve(100, [] { return std::string("earlier arrays"); }));
  std::thread freeing([&] {
    absl::SleepFor(absl::Milliseconds(100));
    held.reset();
  });
  absl::StatusOr<BufferStore::Reservation> waited = store.Reserve(
      80, [] { return std::string("an upload"); }, absl::Seconds(10));
  freeing.join();
  EXPECT_TRUE(waited.ok()) << waited.status();
  const absl::Time before = absl::Now();
  EXPECT_FALSE(store
                   .Reserve(
                       80, [] { return std::string("another"); }, absl::Milliseconds(50))
                   .ok());
  EXPECT_LT(absl::Now() - before, absl::Seconds(5));  // the wait is bounded
}

}  // namespace
}  // namespace switchyard::worker
