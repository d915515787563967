#include "rm/proxy_reports.h"

#include <string>

#include "common/limits.h"
#include "gtest/gtest.h"

namespace switchyard::rm {
namespace {

const absl::Time kFirstReport = absl::FromUnixSeconds(1000);

ReportProxyRequest Report(uint64_t proxy, const std::string& address, int64_t resident) {
  ReportProxyRequest report;
  report.set_proxy(proxy);
  report.set_address(address);
  report.set_hostname("head");
  report.set_pid(42);
  report.set_resident_bytes(resident);
  report.set_host_buffer_bytes(resident / 2);
  report.set_sessions(3);
  return report;
}

TEST(ProxyReports, ListsTheLatestReportOfEachProxyByAddress) {
  ProxyReports reports(absl::Seconds(10), 8);
  reports.Report(Report(7, "b:29000", 100), kFirstReport);
  reports.Report(Report(9, "a:29000", 200), kFirstReport);
  reports.Report(Report(7, "b:29000", 300), kFirstReport + absl::Seconds(1));
  std::vector<ProxyStatus> list = reports.List(kFirstReport + absl::Seconds(3));
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].address(), "a:29000");
  EXPECT_EQ(list[0].resident_bytes(), 200);
  EXPECT_EQ(list[0].last_report_age_ms(), 3000);
  EXPECT_EQ(list[1].address(), "b:29000");
  EXPECT_EQ(list[1].resident_bytes(), 300);
  EXPECT_EQ(list[1].host_buffer_bytes(), 150);
  EXPECT_EQ(list[1].sessions(), 3);
  EXPECT_EQ(list[1].pid(), 42);
  EXPECT_EQ(list[1].hostname(), "head");
  EXPECT_EQ(list[1].last_report_age_ms(), 2000);
}

TEST(ProxyReports, ForgetsAProxyNotHeardFromAndIgnoresProxyZero) {
  ProxyReports reports(absl::Seconds(10), 8);
  reports.Report(Report(0, "nobody", 1), kFirstReport);
  reports.Report(Report(1, "gone", 1), kFirstReport);
  reports.Report(Report(2, "alive", 1), kFirstReport + absl::Seconds(5));
  EXPECT_EQ(reports.List(kFirstReport + absl::Seconds(10)).size(), 2u);  // exactly 10 s: kept
  std::vector<ProxyStatus> list = reports.List(kFirstReport + absl::Seconds(11));
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].address(), "alive");
  EXPECT_EQ(reports.size(), 1u);
}

TEST(ProxyReports, PastTheBoundTheOldestGoesAndLongTextIsCut) {
  ProxyReports reports(absl::Seconds(10), 2);
  reports.Report(Report(1, "first", 1), kFirstReport);
  reports.Report(Report(2, "second", 1), kFirstReport + absl::Seconds(1));
  reports.Report(Report(1, "first", 1),
                 kFirstReport + absl::Seconds(2));  // heard again: not oldest
  reports.Report(Report(3, std::string(limits::kNameBytesMax + 10, 'x'), 1),
                 kFirstReport + absl::Seconds(3));
  std::vector<ProxyStatus> list = reports.List(kFirstReport + absl::Seconds(3));
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].address(), "first");
  EXPECT_EQ(list[1].address().size(), static_cast<size_t>(limits::kNameBytesMax));
}

TEST(ProxyReports, NoRoomListsNothing) {
  ProxyReports reports(absl::Seconds(10), 0);
  reports.Report(Report(1, "a", 1), kFirstReport);
  EXPECT_TRUE(reports.List(kFirstReport).empty());
}

}  // namespace
}  // namespace switchyard::rm
