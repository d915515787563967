// The floor under a dispatched call: one small message each way on a gRPC stream
// (the proxy's session stream and its worker streams are such streams), with the
// server written against gRPC's synchronous API (what Switchyard uses) and its
// callback (reactor) API, over TCP loopback and a Unix-domain socket. Client and
// server share this process, so the CPU and context switches are both sides'.
//   grpc_pingpong_bench [ROUND_TRIPS]   prints {"sync_tcp": {"round_trip_us": ...,
//                                        "cpu_us": ..., "switches": ...}, ...}

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "switchyard/worker.grpc.pb.h"

namespace {

using switchyard::DispatchRequest;
using switchyard::DispatchResponse;

class SyncEcho final : public switchyard::Worker::Service {
  grpc::Status Dispatch(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<DispatchResponse, DispatchRequest>* stream) override {
    DispatchRequest request;
    DispatchResponse answer;
    while (stream->Read(&request)) {
      answer.set_seq(request.seq());
      stream->Write(answer);
    }
    return grpc::Status::OK;
  }
};

// Answers on gRPC's callback threads: each read's answer is started from OnReadDone.
class CallbackEcho final : public switchyard::Worker::CallbackService {
  class Reactor final : public grpc::ServerBidiReactor<DispatchRequest, DispatchResponse> {
   public:
    Reactor() { StartRead(&request_); }
    void OnReadDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status::OK);
        return;
      }
      DispatchResponse answer;
      answer.set_seq(request_.seq());
      {
        absl::MutexLock lock(&mutex_);
        queue_.push_back(std::move(answer));
        if (!writing_) WriteNextLocked();
      }
      StartRead(&request_);
    }
    void OnWriteDone(bool ok) override {
      absl::MutexLock lock(&mutex_);
      writing_ = false;
      if (ok && !queue_.empty()) WriteNextLocked();
    }
    void OnDone() override { delete this; }

   private:
    void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
      writing_ = true;
      current_ = std::move(queue_.front());
      queue_.pop_front();
      StartWrite(&current_);
    }
    DispatchRequest request_;
    absl::Mutex mutex_;
    std::deque<DispatchResponse> queue_ ABSL_GUARDED_BY(mutex_);
    DispatchResponse current_;
    bool writing_ ABSL_GUARDED_BY(mutex_) = false;
  };

  grpc::ServerBidiReactor<DispatchRequest, DispatchResponse>* Dispatch(
      grpc::CallbackServerContext*) override {
    return new Reactor;
  }
};

struct Usage {
  double cpu_s;
  long switches;
};

Usage Now() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return {usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
              (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6,
          usage.ru_nvcsw + usage.ru_nivcsw};
}

// `address`: a Unix-domain socket, or empty for a free loopback port.
std::string Measure(bool callback, const std::string& address, int round_trips) {
  SyncEcho sync_echo;
  CallbackEcho callback_echo;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address.empty() ? "127.0.0.1:0" : address,
                           grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(callback ? static_cast<grpc::Service*>(&callback_echo) : &sync_echo);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) return "{\"error\": \"cannot listen\"}";
  const std::string target = address.empty() ? absl::StrCat("127.0.0.1:", port) : address;
  auto stub =
      switchyard::Worker::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  auto stream = stub->Dispatch(&context);
  DispatchRequest request;
  DispatchResponse answer;
  auto round_trip = [&](int i) {
    request.set_seq(i);
    return stream->Write(request) && stream->Read(&answer);
  };
  for (int i = 0; i < 200; ++i) round_trip(i);  // warm up
  const Usage before = Now();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < round_trips; ++i) {
    if (!round_trip(i)) return "{\"error\": \"the stream failed\"}";
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const Usage after = Now();
  stream->WritesDone();
  (void)stream->Finish();
  server->Shutdown();
  return absl::StrCat(
      "{\"round_trip_us\": ", wall / round_trips * 1e6,
      ", \"cpu_us\": ", (after.cpu_s - before.cpu_s) / round_trips * 1e6,
      ", \"switches\": ", static_cast<double>(after.switches - before.switches) / round_trips, "}");
}

}  // namespace

int main(int argc, char** argv) {
  const int round_trips = argc > 1 ? std::atoi(argv[1]) : 20000;
  const std::string socket = absl::StrCat("unix:/tmp/sy-pingpong-", getpid(), ".sock");
  std::string out = "{";
  // Interleaved, so that the machine's drift touches both APIs alike.
  for (int pass = 0; pass < 2; ++pass) {
    const std::string suffix = pass == 0 ? "" : "_again";
    absl::StrAppend(&out, pass == 0 ? "" : ", ", "\"sync_tcp", suffix,
                    "\": ", Measure(false, "", round_trips));
    absl::StrAppend(&out, ", \"callback_tcp", suffix, "\": ", Measure(true, "", round_trips));
  }
  absl::StrAppend(&out, ", \"sync_uds\": ", Measure(false, socket, round_trips), "}");
  unlink(socket.substr(5).c_str());
  std::printf("%s\n", out.c_str());
}
