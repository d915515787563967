// What a worker decodes from proxies and peers, sent to a real in-process worker
// (support/in_process_fleet.h) over its gRPC API: an operation on the ordered stream
// (launches, transfers, assembles, deletions, awaits), a compile request (programs,
// compile options, device ids), a buffer put (header and bytes), a host callback's
// result (arrays of any dtype and shape), a program description request or a peer's
// request for offers. Input: one selector byte, then the message.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/time/clock.h"
#include "common/grpc_server.h"
#include "fuzz/quiet.h"
#include "support/in_process_fleet.h"
#include "switchyard/worker.grpc.pb.h"

namespace {

using switchyard::Worker;

class World {
 public:
  World() {
    fleet_.StartOrAbort(1, 2);
    stub_ = Worker::NewStub(switchyard::CreateChannel(fleet_.worker_address(0)));
  }

  void Dispatch(const switchyard::DispatchRequest& op) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto stream = stub_->Dispatch(&context);
    stream->Write(op);
    stream->WritesDone();
    switchyard::DispatchResponse response;
    while (stream->Read(&response)) {
    }
    (void)stream->Finish();
  }

  void Compile(const switchyard::CompileRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    switchyard::CompileResponse response;
    (void)stub_->Compile(&context, request, &response);
  }

  void Put(const switchyard::BufferHeader& header, const uint8_t* bytes, size_t size) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    switchyard::PutBufferResponse response;
    auto writer = stub_->PutBuffer(&context, &response);
    switchyard::PutBufferChunk chunk;
    *chunk.mutable_header() = header;
    writer->Write(chunk);
    switchyard::PutBufferChunk data;
    data.set_data(bytes, size);
    writer->Write(data);
    writer->WritesDone();
    (void)writer->Finish();
  }

  void ReturnHostCallback(const switchyard::HostCallbackResult& result) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    switchyard::ReturnHostCallbackResponse response;
    (void)stub_->ReturnHostCallback(&context, result, &response);
  }

  void Describe(const switchyard::DescribeProgramRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    switchyard::DescribeProgramResponse response;
    (void)stub_->DescribeProgram(&context, request, &response);
  }

  void Offer(const switchyard::OfferBuffersRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    switchyard::OfferBuffersResponse response;
    (void)stub_->OfferBuffers(&context, request, &response);
  }

 private:
  switchyard::test_support::InProcessFleet fleet_;
  std::unique_ptr<Worker::Stub> stub_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return -1;
  static World* world = new World;  // lives until exit: the fleet's threads use it
  const uint8_t* body = data + 1;
  const int body_size = static_cast<int>(size - 1);
  switch (data[0] % 6) {
    case 0: {
      switchyard::DispatchRequest op;
      if (!op.ParseFromArray(body, body_size)) return -1;
      world->Dispatch(op);
      break;
    }
    case 1: {
      switchyard::CompileRequest request;
      if (!request.ParseFromArray(body, body_size)) return -1;
      // As in fuzz_ifrt_request: the plugin parses programs, and crashes on corrupt ones.
      if (!request.program().empty()) request.set_program(switchyard::test_support::kAddOneProgram);
      world->Compile(request);
      break;
    }
    case 2: {
      // The header's own length first, then the header, then the bytes.
      if (body_size < 1) return -1;
      const int header_size = std::min<int>(body[0], body_size - 1);
      switchyard::BufferHeader header;
      if (!header.ParseFromArray(body + 1, header_size)) return -1;
      world->Put(header, body + 1 + header_size, body_size - 1 - header_size);
      break;
    }
    case 3: {
      switchyard::HostCallbackResult result;
      if (!result.ParseFromArray(body, body_size)) return -1;
      world->ReturnHostCallback(result);
      break;
    }
    case 4: {
      switchyard::DescribeProgramRequest request;
      if (!request.ParseFromArray(body, body_size)) return -1;
      world->Describe(request);
      break;
    }
    case 5: {
      switchyard::OfferBuffersRequest request;
      if (!request.ParseFromArray(body, body_size)) return -1;
      world->Offer(request);
      break;
    }
  }
  return 0;
}
