// What the proxy decodes from a client's HostCallbacks.Serve stream (any process that
// reaches the proxy's port may open one): key registrations and call results, against a
// real HostCallbackService over gRPC's in-process transport, with a worker's call
// pending. Input: replies, each `[n:2 bytes, little-endian][HostCallbackReply]`; a result
// whose call_id is 0
// answers the pending call, so that the fuzzer reaches the matching path too.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>

#include "absl/status/status.h"
#include "common/grpc_server.h"
#include "fuzz/quiet.h"
#include "proxy/host_callbacks.h"
#include "switchyard/host_callback.grpc.pb.h"

namespace {

using switchyard::HostCallbackEvent;
using switchyard::HostCallbackReply;

class World {
 public:
  World() {
    auto started = switchyard::StartGrpcServer(switchyard::kInProcessHost, 0, {&service_});
    if (!started.ok()) abort();
    server_ = std::make_unique<switchyard::StartedServer>(*std::move(started));
    stub_ = switchyard::HostCallbacks::NewStub(switchyard::CreateChannel(server_->address));
  }

  void Run(const uint8_t* data, size_t size) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto stream = stub_->Serve(&context);
    const std::string key = "fuzz-" + std::to_string(++streams_);
    HostCallbackReply reply;
    reply.set_register_key(key);
    HostCallbackEvent event;
    if (!stream->Write(reply) || !stream->Read(&event)) return Finish(stream.get());
    switchyard::HostCallbackCall call;
    call.set_key(key);
    call.set_call_id(7);
    call.add_results()->set_dtype(11);  // F32[2]
    call.mutable_results(0)->add_dims(2);
    service_.Deliver(call, [this](const switchyard::HostCallbackResult&) {
      ++returned_;
      return absl::OkStatus();
    });
    if (!stream->Read(&event) || !event.has_call()) return Finish(stream.get());
    const uint64_t pending = event.call().call_id();
    // Events are read as they come, as the client does: gRPC's in-process transport
    // buffers nothing, so a server writing to a client that only writes would wait.
    std::thread reader([&stream] {
      HostCallbackEvent ignored;
      while (stream->Read(&ignored)) {
      }
    });
    size_t offset = 0;
    while (offset + 2 <= size) {
      const size_t n = std::min<size_t>(data[offset] | data[offset + 1] << 8, size - offset - 2);
      if (reply.ParseFromArray(data + offset + 2, static_cast<int>(n))) {
        if (reply.has_result() && reply.result().call_id() == 0) {
          reply.mutable_result()->set_call_id(pending);
        }
        if (!stream->Write(reply)) break;
      }
      offset += 2 + n;
    }
    stream->WritesDone();
    reader.join();
    (void)stream->Finish();
  }

 private:
  template <typename Stream>
  void Finish(Stream* stream) {
    stream->WritesDone();
    HostCallbackEvent event;
    while (stream->Read(&event)) {
    }
    (void)stream->Finish();
  }

  switchyard::proxy::HostCallbackService service_;
  std::unique_ptr<switchyard::StartedServer> server_;
  std::unique_ptr<switchyard::HostCallbacks::Stub> stub_;
  uint64_t streams_ = 0;
  std::atomic<int64_t> returned_{0};
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* world = new World;  // lives until exit: the server's threads use it
  world->Run(data, size);
  return 0;
}
