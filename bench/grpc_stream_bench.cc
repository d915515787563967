// Raw gRPC streaming on loopback, the bandwidth baseline for Switchyard's
// transfers: the same chunking (4 MiB messages) and channel settings, no PJRT.
//   grpc_stream_bench SIZE_MIB [REPS]    prints {"upload_mib_s": ..., "download_mib_s": ...}

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/grpc_server.h"
#include "common/limits.h"
#include "switchyard/worker.grpc.pb.h"

namespace {

using switchyard::GetBufferChunk;
using switchyard::GetBufferRequest;
using switchyard::PutBufferChunk;
using switchyard::PutBufferResponse;

class Sink final : public switchyard::Worker::Service {
 public:
  explicit Sink(int64_t bytes)
      : payload_(switchyard::limits::kBufferChunkBytes, 'x'), bytes_(bytes) {}

  grpc::Status PutBuffer(grpc::ServerContext*, grpc::ServerReader<PutBufferChunk>* reader,
                         PutBufferResponse*) override {
    PutBufferChunk chunk;
    while (reader->Read(&chunk)) {
    }
    return grpc::Status::OK;
  }

  grpc::Status GetBuffer(grpc::ServerContext*, const GetBufferRequest*,
                         grpc::ServerWriter<GetBufferChunk>* writer) override {
    GetBufferChunk chunk;
    for (int64_t sent = 0; sent < bytes_; sent += payload_.size()) {
      chunk.set_data(payload_.data(), std::min<int64_t>(payload_.size(), bytes_ - sent));
      writer->Write(chunk);
    }
    return grpc::Status::OK;
  }

 private:
  std::string payload_;
  int64_t bytes_;
};

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t mib = argc > 1 ? std::atoll(argv[1]) : 64;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 3;
  const int64_t bytes = mib << 20;
  Sink sink(bytes);
  auto server = switchyard::StartGrpcServer("127.0.0.1", 0, {&sink});
  if (!server.ok()) return 1;
  auto stub = switchyard::Worker::NewStub(
      switchyard::CreateChannel("127.0.0.1:" + std::to_string(server->port)));
  const std::string payload(switchyard::limits::kBufferChunkBytes, 'y');
  double up = 0, down = 0;
  for (int r = 0; r < reps; ++r) {
    auto start = std::chrono::steady_clock::now();
    {
      grpc::ClientContext context;
      PutBufferResponse response;
      auto writer = stub->PutBuffer(&context, &response);
      PutBufferChunk chunk;
      for (int64_t sent = 0; sent < bytes; sent += payload.size()) {
        chunk.set_data(payload.data(), std::min<int64_t>(payload.size(), bytes - sent));
        writer->Write(chunk);
      }
      writer->WritesDone();
      writer->Finish();
    }
    up = std::max(up, mib / Seconds(start));
    start = std::chrono::steady_clock::now();
    {
      grpc::ClientContext context;
      auto reader = stub->GetBuffer(&context, GetBufferRequest());
      GetBufferChunk chunk;
      std::string all;
      all.reserve(bytes);
      while (reader->Read(&chunk)) all.append(chunk.data());
      reader->Finish();
    }
    down = std::max(down, mib / Seconds(start));
  }
  std::printf("{\"upload_mib_s\": %.1f, \"download_mib_s\": %.1f}\n", up, down);
  server->server->Shutdown();
  return 0;
}
