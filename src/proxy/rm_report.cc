#include "proxy/rm_report.h"

#include <unistd.h>

#include <chrono>
#include <utility>

#include "absl/time/time.h"
#include "common/grpc_server.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/machine_memory.h"
#include "common/thread_name.h"

namespace switchyard::proxy {
namespace {

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

}  // namespace

RmReporter::RmReporter(const std::string& rm_address, uint64_t proxy_id, std::string address,
                       std::function<ProxyLoad()> load)
    : proxy_id_(proxy_id),
      address_(std::move(address)),
      load_(std::move(load)),
      rm_(ResourceManager::NewStub(CreateChannel(rm_address))) {
  thread_ = std::thread([this] {
    NameThisThread("sy-rm-report");
    do {
      if (!ReportOnce()) return;
    } while (
        !stop_.WaitForNotificationWithTimeout(absl::Milliseconds(limits::kProxyReportPeriodMs)));
  });
}

RmReporter::~RmReporter() {
  stop_.Notify();
  thread_.join();
}

bool RmReporter::ReportOnce() {
  static const std::string hostname = HostName();
  const ProxyLoad load = load_();
  ReportProxyRequest request;
  request.set_proxy(proxy_id_);
  request.set_address(address_);
  request.set_hostname(hostname);
  request.set_pid(getpid());
  request.set_resident_bytes(ResidentBytes());
  request.set_host_buffer_bytes(load.host_buffer_bytes);
  request.set_sessions(load.sessions);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  ReportProxyResponse response;
  const grpc::Status status = rm_->ReportProxy(&context, request, &response);
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    SY_LOG(Info) << "the resource manager takes no proxy reports (an older version): "
                    "`switchyard status` will not list this proxy";
    return false;
  }
  return true;  // an RM away for now is asked again next period
}

}  // namespace switchyard::proxy
