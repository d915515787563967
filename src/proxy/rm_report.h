#pragma once

// Tells the RM what this proxy holds (ReportProxy), every limits::kProxyReportPeriodMs,
// so that `switchyard status` shows who holds memory. On a thread of its own
// (sy-rm-report); a report waits at most a second for the RM, and an older RM that
// answers UNIMPLEMENTED is not asked again.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "switchyard/rm.grpc.pb.h"

namespace switchyard::proxy {

// What the proxy holds for its sessions now.
struct ProxyLoad {
  int64_t host_buffer_bytes = 0;
  int64_t sessions = 0;
};

class RmReporter {
 public:
  // `address`: where clients reach the proxy. `load` is called on the reporter's thread.
  RmReporter(const std::string& rm_address, uint64_t proxy_id, std::string address,
             std::function<ProxyLoad()> load);
  ~RmReporter();  // stops the thread
  RmReporter(const RmReporter&) = delete;
  RmReporter& operator=(const RmReporter&) = delete;

 private:
  // False once the RM said it does not take reports.
  bool ReportOnce();

  const uint64_t proxy_id_;
  const std::string address_;
  const std::function<ProxyLoad()> load_;
  std::unique_ptr<ResourceManager::Stub> rm_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace switchyard::proxy
