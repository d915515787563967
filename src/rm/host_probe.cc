#include "rm/host_probe.h"

#include <memory>

#include "common/grpc_server.h"
#include "switchyard/worker.grpc.pb.h"

namespace switchyard::rm {

std::vector<HostAnswer> AskHosts(const std::vector<HostStatus>& hosts, absl::Duration timeout) {
  struct Call {
    // A fresh channel each: a cached one may sit in reconnect backoff and refuse at once.
    std::unique_ptr<Worker::Stub> stub;
    grpc::ClientContext context;
    GetInfoResponse info;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<GetInfoResponse>> reader;
  };
  grpc::CompletionQueue queue;
  std::vector<std::unique_ptr<Call>> calls;
  calls.reserve(hosts.size());
  for (size_t i = 0; i < hosts.size(); ++i) {
    auto call = std::make_unique<Call>();
    call->stub = Worker::NewStub(CreateChannel(hosts[i].address()));
    call->context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    call->reader = call->stub->AsyncGetInfo(&call->context, GetInfoRequest(), &queue);
    call->reader->Finish(&call->info, &call->status, reinterpret_cast<void*>(i));
    calls.push_back(std::move(call));
  }
  std::vector<HostAnswer> answers(hosts.size(), HostAnswer::kNoAnswer);
  // Every call finishes by its deadline, so this loop ends.
  for (size_t done = 0; done < calls.size(); ++done) {
    void* tag = nullptr;
    bool ok = false;
    if (!queue.Next(&tag, &ok)) break;
    const size_t i = reinterpret_cast<size_t>(tag);
    const grpc::Status& status = calls[i]->status;
    const std::string& boot_id = hosts[i].boot_id();
    if (status.ok()) {
      answers[i] = boot_id.empty() || calls[i]->info.boot_id() == boot_id ? HostAnswer::kItself
                                                                          : HostAnswer::kGone;
    } else if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      answers[i] = HostAnswer::kGone;  // nothing listens there any more
    }
  }
  queue.Shutdown();
  void* tag;
  bool ok;
  while (queue.Next(&tag, &ok)) {
  }
  return answers;
}

}  // namespace switchyard::rm
