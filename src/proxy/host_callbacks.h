#pragma once

// Host callbacks at the proxy (proto/switchyard/host_callback.proto). A client serves
// its keys on a HostCallbacks.Serve stream; a worker's call (DispatchResponse
// .host_callback) goes to the stream serving its key, and the client's result back to
// that worker. Nothing here blocks a worker connection's reader or a client's stream:
// calls are queued for the client's writer, results for a thread of ours that makes
// the unary call to the worker. Thread-safe.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/ordered_writer.h"
#include "switchyard/host_callback.grpc.pb.h"

namespace switchyard::proxy {

class HostCallbackService final : public ::switchyard::HostCallbacks::Service {
 public:
  // Gives a call's result to the worker that made it; may block (a unary call).
  using Reply = std::function<absl::Status(const HostCallbackResult&)>;

  HostCallbackService();
  ~HostCallbackService() override;  // Stop()

  // A worker's call, answered through `reply`; never blocks.
  void Deliver(const HostCallbackCall& call, Reply reply) ABSL_LOCKS_EXCLUDED(mutex_);
  // Stops returning results (what `reply`s reach must outlive this). Idempotent.
  void Stop();

  grpc::Status Serve(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<HostCallbackEvent, HostCallbackReply>* stream) override;

 private:
  struct Client;
  struct Pending {
    std::shared_ptr<Client> client;
    uint64_t worker_call_id = 0;
    Reply reply;
  };
  struct Return {
    Reply reply;
    HostCallbackResult result;
  };
  void Fail(Reply reply, uint64_t worker_call_id, absl::Status status);
  void Register(const std::shared_ptr<Client>& client, const std::string& key)
      ABSL_LOCKS_EXCLUDED(mutex_);
  void Complete(const std::shared_ptr<Client>& client, HostCallbackResult result)
      ABSL_LOCKS_EXCLUDED(mutex_);
  void Drop(const std::shared_ptr<Client>& client) ABSL_LOCKS_EXCLUDED(mutex_);

  absl::Mutex mutex_;
  absl::flat_hash_map<std::string, std::shared_ptr<Client>> keys_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mutex_);
  uint64_t next_call_ ABSL_GUARDED_BY(mutex_) = 1;
  OrderedWriter<Return> returns_;
};

}  // namespace switchyard::proxy
