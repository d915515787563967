#include "worker/buffer_store.h"

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

}  // namespace
}  // namespace switchyard::worker
