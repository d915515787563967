#include "worker/rm_kv_store.h"

#include "absl/strings/str_cat.h"
#include "common/grpc_server.h"
#include "common/grpc_status.h"

namespace switchyard::worker {
namespace {

// Room for the RM to answer after its own wait has run out.
constexpr absl::Duration kCallSlack = absl::Seconds(5);

}  // namespace

RmKeyValueStore::RmKeyValueStore(const std::string& rm_address, int slice_index,
                                 const std::string& epoch)
    : prefix_(absl::StrCat("slice/", slice_index, "/", epoch, "/")),
      stub_(ResourceManager::NewStub(CreateChannel(rm_address))) {}

absl::StatusOr<std::string> RmKeyValueStore::GetWithTimeout(std::string_view key,
                                                            absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout + kCallSlack));
  // The RM may still be starting when the plugin asks: wait for it.
  context.set_wait_for_ready(true);
  KeyValueGetRequest request;
  request.set_key(prefix_ + std::string(key));
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  KeyValueGetResponse response;
  absl::Status status = FromGrpcStatus(stub_->KeyValueGet(&context, request, &response));
  if (!status.ok()) {
    return absl::Status(
        status.code(),
        absl::StrCat("key '", std::string(key), "' from the resource manager: ", status.message()));
  }
  return std::move(*response.mutable_value());
}

absl::StatusOr<std::string> RmKeyValueStore::Get(std::string_view key, absl::Duration timeout) {
  return GetWithTimeout(key, timeout);
}

absl::StatusOr<std::string> RmKeyValueStore::TryGet(std::string_view key) {
  return GetWithTimeout(key, absl::ZeroDuration());
}

absl::Status RmKeyValueStore::Put(std::string_view key, std::string_view value) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kCallSlack));
  context.set_wait_for_ready(true);
  KeyValuePutRequest request;
  request.set_key(prefix_ + std::string(key));
  request.set_value(std::string(value));
  request.set_allow_overwrite(true);
  KeyValuePutResponse response;
  return FromGrpcStatus(stub_->KeyValuePut(&context, request, &response));
}

}  // namespace switchyard::worker
