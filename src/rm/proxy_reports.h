#pragma once

// The proxies the RM has heard from lately and what each said it holds (ReportProxy),
// for `switchyard status` and the dashboard. Not for placement: a report only says
// how things stood a moment ago. Time is passed in; not thread-safe (the RM's lock).

#include <cstdint>
#include <map>
#include <vector>

#include "absl/time/time.h"
#include "switchyard/rm.pb.h"

namespace switchyard::rm {

class ProxyReports {
 public:
  // A proxy is listed until `forget_after` passes without a report from it; at most
  // `max_proxies` are listed (past them, the one heard from longest ago is dropped).
  ProxyReports(absl::Duration forget_after, int64_t max_proxies)
      : forget_after_(forget_after), max_proxies_(max_proxies) {}

  // Keeps `report` as proxy `report.proxy()`'s latest (a report of proxy 0 is
  // ignored: not a proxy). Text fields longer than limits::kNameBytesMax are cut.
  void Report(const ReportProxyRequest& report, absl::Time now);
  // The proxies heard from within `forget_after` of `now`, by address, then id;
  // forgets the others.
  std::vector<ProxyStatus> List(absl::Time now);

  size_t size() const { return reports_.size(); }

 private:
  struct Entry {
    ReportProxyRequest report;
    absl::Time at;
  };
  void Forget(absl::Time now);

  const absl::Duration forget_after_;
  const int64_t max_proxies_;
  std::map<uint64_t, Entry> reports_;  // by proxy id
};

}  // namespace switchyard::rm
