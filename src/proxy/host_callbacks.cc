#include "proxy/host_callbacks.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/thread_name.h"

namespace switchyard::proxy {

// One Serve stream: the keys it serves, and its writer.
struct HostCallbackService::Client {
  using Stream = grpc::ServerReaderWriter<HostCallbackEvent, HostCallbackReply>;
  explicit Client(Stream* stream)
      : writer([stream](const HostCallbackEvent& event) { return stream->Write(event); },
               "sy-cb-out") {}
  int64_t keys = 0;  // guarded by the service's mutex_
  OrderedWriter<HostCallbackEvent> writer;
};

HostCallbackService::HostCallbackService()
    : returns_(
          [](const Return& r) {
            absl::Status status = r.reply(r.result);
            if (!status.ok()) {
              SY_LOG(Warning) << "could not return host callback result " << r.result.call_id()
                              << " to its worker: " << status;
            }
            return true;  // one worker's failure is not the writer's
          },
          "sy-cb-return") {}

HostCallbackService::~HostCallbackService() { Stop(); }

void HostCallbackService::Stop() {
  returns_.Close(absl::Seconds(1), [] {});
}

void HostCallbackService::Fail(Reply reply, uint64_t worker_call_id, absl::Status status) {
  HostCallbackResult result;
  result.set_call_id(worker_call_id);
  result.set_code(static_cast<int>(status.code()));
  result.set_message(std::string(status.message()));
  returns_.Post(Return{std::move(reply), std::move(result)});
}

void HostCallbackService::Deliver(const HostCallbackCall& call, Reply reply) {
  std::shared_ptr<Client> client;
  HostCallbackEvent event;
  uint64_t id;
  {
    absl::MutexLock lock(&mutex_);
    auto it = keys_.find(call.key());
    if (it == keys_.end()) {
      Fail(std::move(reply), call.call_id(),
           absl::UnavailableError(
               "no client serves this program's host callbacks: the process that compiled it "
               "has disconnected, or compiled it without switchyard.initialize()"));
      return;
    }
    client = it->second;
    id = next_call_++;
    pending_[id] = Pending{client, call.call_id(), std::move(reply)};
  }
  *event.mutable_call() = call;
  event.mutable_call()->set_call_id(id);
  if (!client->writer.Post(std::move(event))) {
    Pending pending;
    {
      absl::MutexLock lock(&mutex_);
      auto it = pending_.find(id);
      if (it == pending_.end()) return;  // failed by Drop meanwhile
      pending = std::move(it->second);
      pending_.erase(it);
    }
    Fail(std::move(pending.reply), pending.worker_call_id,
         absl::UnavailableError("the client serving host callbacks has disconnected"));
  }
}

void HostCallbackService::Register(const std::shared_ptr<Client>& client, const std::string& key) {
  HostCallbackEvent event;
  {
    absl::MutexLock lock(&mutex_);
    if (key.empty() || key.size() > 256) {
      event.set_error("a host callback key is 1 to 256 bytes");
    } else if (client->keys >= limits::kHostCallbackKeysMax) {
      event.set_error(absl::StrCat("a client serves at most ", limits::kHostCallbackKeysMax,
                                   " host callback keys"));
    } else if (!keys_.try_emplace(key, client).second) {
      event.set_error("this host callback key is served by another stream");
    } else {
      ++client->keys;
      event.set_registered(key);
    }
  }
  client->writer.Write(std::move(event));
}

void HostCallbackService::Complete(const std::shared_ptr<Client>& client,
                                   HostCallbackResult result) {
  Pending pending;
  {
    absl::MutexLock lock(&mutex_);
    auto it = pending_.find(result.call_id());
    // Only the stream a call went to may answer it.
    if (it == pending_.end() || it->second.client != client) return;
    pending = std::move(it->second);
    pending_.erase(it);
  }
  result.set_call_id(pending.worker_call_id);
  returns_.Post(Return{std::move(pending.reply), std::move(result)});
}

void HostCallbackService::Drop(const std::shared_ptr<Client>& client) {
  std::vector<Pending> failed;
  {
    absl::MutexLock lock(&mutex_);
    absl::erase_if(keys_, [&](const auto& entry) { return entry.second == client; });
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.client == client) {
        failed.push_back(std::move(it->second));
        pending_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  for (Pending& pending : failed) {
    Fail(std::move(pending.reply), pending.worker_call_id,
         absl::UnavailableError(
             "the client serving this program's host callbacks disconnected before answering"));
  }
}

grpc::Status HostCallbackService::Serve(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<HostCallbackEvent, HostCallbackReply>* stream) {
  auto client = std::make_shared<Client>(stream);
  HostCallbackReply reply;
  while (stream->Read(&reply)) {
    switch (reply.kind_case()) {
      case HostCallbackReply::kRegisterKey:
        Register(client, reply.register_key());
        break;
      case HostCallbackReply::kResult:
        Complete(client, std::move(*reply.mutable_result()));
        break;
      default:
        break;
    }
  }
  Drop(client);
  client->writer.Close(absl::Seconds(1), [context] { context->TryCancel(); });
  return grpc::Status::OK;
}

}  // namespace switchyard::proxy
