#include "pjrt/kv_callbacks.h"

#include <cstring>
#include <string>

namespace switchyard::pjrt {
namespace {

PJRT_Error_Code ToPjrtCode(absl::StatusCode code) {
  // PJRT_Error_Code numbers are absl's.
  return static_cast<PJRT_Error_Code>(static_cast<int>(code));
}

// The plugin owns the error it gets back: it is made by the plugin's own
// callback_error, from our status.
PJRT_Error* ToPjrtError(PJRT_CallbackError* callback_error, const absl::Status& status) {
  if (status.ok()) return nullptr;
  const std::string message(status.message());
  return (*callback_error)(ToPjrtCode(status.code()), message.data(), message.size());
}

void DeleteValue(char* value) { delete[] value; }

// Hands a value to the plugin, which copies it and then calls the deleter.
template <typename CallbackArgs>
void SetValue(const std::string& value, CallbackArgs* args) {
  char* copy = new char[value.size() + 1];
  std::memcpy(copy, value.data(), value.size());
  copy[value.size()] = '\0';
  args->value = copy;
  args->value_size = value.size();
  args->value_deleter_callback = &DeleteValue;
}

}  // namespace

PJRT_Error* KeyValueGet(PJRT_KeyValueGetCallback_Args* args) {
  auto* store = static_cast<KeyValueStore*>(args->user_arg);
  auto value = store->Get(std::string_view(args->key, args->key_size),
                          absl::Milliseconds(args->timeout_in_ms));
  if (!value.ok()) return ToPjrtError(args->callback_error, value.status());
  SetValue(*value, args);
  return nullptr;
}

PJRT_Error* KeyValueTryGet(PJRT_KeyValueTryGetCallback_Args* args) {
  auto* store = static_cast<KeyValueStore*>(args->user_arg);
  auto value = store->TryGet(std::string_view(args->key, args->key_size));
  if (!value.ok()) return ToPjrtError(args->callback_error, value.status());
  SetValue(*value, args);
  return nullptr;
}

PJRT_Error* KeyValuePut(PJRT_KeyValuePutCallback_Args* args) {
  auto* store = static_cast<KeyValueStore*>(args->user_arg);
  return ToPjrtError(args->callback_error,
                     store->Put(std::string_view(args->key, args->key_size),
                                std::string_view(args->value, args->value_size)));
}

void BindKeyValueStore(KeyValueStore* store, PJRT_Client_Create_Args* args) {
  args->kv_get_callback = &KeyValueGet;
  args->kv_get_user_arg = store;
  args->kv_try_get_callback = &KeyValueTryGet;
  args->kv_try_get_user_arg = store;
  args->kv_put_callback = &KeyValuePut;
  args->kv_put_user_arg = store;
}

}  // namespace switchyard::pjrt
