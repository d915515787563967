// The kv callbacks a multi-host plugin calls, driven the way a plugin drives them.
// (The CPU plugin never calls them; the GPU plugin does while creating a client.)

#include "pjrt/kv_callbacks.h"

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace switchyard::pjrt {
namespace {

class MapStore : public KeyValueStore {
 public:
  absl::StatusOr<std::string> Get(std::string_view key, absl::Duration timeout) override {
    last_timeout = timeout;
    auto it = values.find(std::string(key));
    if (it == values.end()) return absl::DeadlineExceededError("no such key yet");
    return it->second;
  }
  absl::StatusOr<std::string> TryGet(std::string_view key) override {
    auto it = values.find(std::string(key));
    if (it == values.end()) return absl::NotFoundError("no such key");
    return it->second;
  }
  absl::Status Put(std::string_view key, std::string_view value) override {
    values[std::string(key)] = std::string(value);
    return absl::OkStatus();
  }
  std::map<std::string, std::string> values;
  absl::Duration last_timeout;
};

// Stands in for the plugin's error factory: records what it was given.
struct RecordedError {
  PJRT_Error_Code code;
  std::string message;
};
RecordedError recorded;
PJRT_Error* RecordError(PJRT_Error_Code code, const char* message, size_t size) {
  recorded = {code, std::string(message, size)};
  return reinterpret_cast<PJRT_Error*>(&recorded);
}
PJRT_CallbackError kRecordError = &RecordError;

TEST(KvCallbacks, BindsAllThree) {
  MapStore store;
  PJRT_Client_Create_Args args{};
  BindKeyValueStore(&store, &args);
  EXPECT_EQ(args.kv_get_user_arg, &store);
  EXPECT_EQ(args.kv_try_get_user_arg, &store);
  EXPECT_EQ(args.kv_put_user_arg, &store);
  EXPECT_NE(args.kv_get_callback, nullptr);
  EXPECT_NE(args.kv_try_get_callback, nullptr);
  EXPECT_NE(args.kv_put_callback, nullptr);
}

TEST(KvCallbacks, PutThenGetRoundTripsBinaryValues) {
  MapStore store;
  const std::string value("topo\0logy", 9);
  PJRT_KeyValuePutCallback_Args put{};
  put.struct_size = sizeof(put);
  put.key = "gpu:local_topology/1";
  put.key_size = 20;
  put.value = value.data();
  put.value_size = value.size();
  put.callback_error = &kRecordError;
  put.user_arg = &store;
  ASSERT_EQ(KeyValuePut(&put), nullptr);
  EXPECT_EQ(store.values["gpu:local_topology/1"], value);

  PJRT_KeyValueGetCallback_Args get{};
  get.struct_size = sizeof(get);
  get.key = "gpu:local_topology/1";
  get.key_size = 20;
  get.timeout_in_ms = 1500;
  get.callback_error = &kRecordError;
  get.user_arg = &store;
  ASSERT_EQ(KeyValueGet(&get), nullptr);
  EXPECT_EQ(std::string(get.value, get.value_size), value);
  EXPECT_EQ(store.last_timeout, absl::Milliseconds(1500));
  ASSERT_NE(get.value_deleter_callback, nullptr);
  get.value_deleter_callback(get.value);  // as the plugin does once it has copied it
}

TEST(KvCallbacks, ErrorsGoThroughThePluginsFactoryWithTheirCode) {
  MapStore store;
  PJRT_KeyValueGetCallback_Args get{};
  get.key = "missing";
  get.key_size = 7;
  get.callback_error = &kRecordError;
  get.user_arg = &store;
  EXPECT_EQ(KeyValueGet(&get), reinterpret_cast<PJRT_Error*>(&recorded));
  EXPECT_EQ(recorded.code, PJRT_Error_Code_DEADLINE_EXCEEDED);
  EXPECT_EQ(recorded.message, "no such key yet");

  PJRT_KeyValueTryGetCallback_Args try_get{};
  try_get.key = "missing";
  try_get.key_size = 7;
  try_get.callback_error = &kRecordError;
  try_get.user_arg = &store;
  EXPECT_NE(KeyValueTryGet(&try_get), nullptr);
  EXPECT_EQ(recorded.code, PJRT_Error_Code_NOT_FOUND);
}

}  // namespace
}  // namespace switchyard::pjrt
