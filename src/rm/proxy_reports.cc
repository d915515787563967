#include "rm/proxy_reports.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <tuple>

#include "common/limits.h"

namespace switchyard::rm {
namespace {

std::string Cut(const std::string& text) { return text.substr(0, limits::kNameBytesMax); }

}  // namespace

void ProxyReports::Forget(absl::Time now) {
  for (auto it = reports_.begin(); it != reports_.end();) {
    it = now - it->second.at > forget_after_ ? reports_.erase(it) : std::next(it);
  }
}

void ProxyReports::Report(const ReportProxyRequest& report, absl::Time now) {
  if (report.proxy() == 0 || max_proxies_ <= 0) return;
  Forget(now);
  if (reports_.count(report.proxy()) == 0 &&
      static_cast<int64_t>(reports_.size()) >= max_proxies_) {
    auto oldest =
        std::min_element(reports_.begin(), reports_.end(),
                         [](const auto& a, const auto& b) { return a.second.at < b.second.at; });
    reports_.erase(oldest);
  }
  Entry& entry = reports_[report.proxy()];
  entry.report = report;
  entry.report.set_address(Cut(report.address()));
  entry.report.set_hostname(Cut(report.hostname()));
  entry.at = now;
}

std::vector<ProxyStatus> ProxyReports::List(absl::Time now) {
  Forget(now);
  std::vector<std::pair<uint64_t, const Entry*>> entries;
  for (const auto& [id, entry] : reports_) entries.emplace_back(id, &entry);
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second->report.address(), a.first) <
           std::tie(b.second->report.address(), b.first);
  });
  std::vector<ProxyStatus> list;
  list.reserve(entries.size());
  for (const auto& [id, entry] : entries) {
    const ReportProxyRequest& report = entry->report;
    ProxyStatus& status = list.emplace_back();
    status.set_address(report.address());
    status.set_hostname(report.hostname());
    status.set_pid(report.pid());
    status.set_resident_bytes(report.resident_bytes());
    status.set_host_buffer_bytes(report.host_buffer_bytes());
    status.set_sessions(report.sessions());
    status.set_last_report_age_ms(absl::ToInt64Milliseconds(now - entry->at));
  }
  return list;
}

}  // namespace switchyard::rm
