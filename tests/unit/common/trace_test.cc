#include "common/trace.h"

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace switchyard::trace {
namespace {

TEST(TraceTest, RecordsOnlyWhileAWindowIsOpen) {
  Record("before", "test", absl::Now(), absl::Now(), ThisThreadLane());
  const uint64_t window = Begin();
  EXPECT_TRUE(Active());
  { Scoped span("inside", "test"); }
  const absl::Time now = absl::Now();
  Record("launch", "launch", now, now + absl::Microseconds(15), DeviceLane(3));
  // Began before the window: not its.
  Record("old", "launch", absl::FromUnixMicros(10), absl::FromUnixMicros(25), DeviceLane(3));
  int64_t dropped = -1;
  std::vector<Span> spans = End(window, 0, &dropped);
  EXPECT_FALSE(Active());
  Record("after", "test", absl::Now(), absl::Now(), ThisThreadLane());
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].name, "inside");
  EXPECT_EQ(spans[1].name, "launch");
  EXPECT_EQ(spans[1].duration_ns, 15000);
  EXPECT_EQ(dropped, 0);
  EXPECT_EQ(LaneNames().at(DeviceLane(3)), "device 3");
  EXPECT_TRUE(End(window, 0).empty());  // closed already
}

// Two sessions' profiles overlap: each gets what happened in its own window, and the
// other session's spans without their names.
TEST(TraceTest, OverlappingWindowsOfTwoSessions) {
  const uint64_t first = Begin();
  { Scoped span("first's request", "request", 1); }
  const uint64_t second = Begin();
  { Scoped span("second's request", "request", 2); }
  { Scoped span("a transfer", "transfer"); }
  std::vector<Span> of_first = End(first, 1);
  EXPECT_TRUE(Active());  // the second is still open
  { Scoped span("second's launch", "launch", 2); }
  std::vector<Span> of_second = End(second, 2);
  EXPECT_FALSE(Active());
  ASSERT_EQ(of_first.size(), 3u);
  EXPECT_EQ(of_first[0].name, "first's request");
  EXPECT_EQ(of_first[1].name, "(another session)");
  EXPECT_EQ(of_first[2].name, "a transfer");
  ASSERT_EQ(of_second.size(), 3u);
  EXPECT_EQ(of_second[0].name, "second's request");
  EXPECT_EQ(of_second[2].name, "second's launch");
}

TEST(TraceTest, ChromeJsonHasARowPerProcessAndEscapesNames) {
  ProcessTrace proxy{"proxy", {{"a \"quoted\"\nname", "request", 1000, 2000, 1}}, {{1, "session"}}};
  ProcessTrace worker{"worker s0h0",
                      {{"jit_f", "launch", 3000, 500, DeviceLane(0)}},
                      {{DeviceLane(0), "device 0"}}};
  const std::string json = ChromeTraceJson({proxy, worker});
  EXPECT_NE(json.find(R"("name":"process_name","args":{"name":"proxy"})"), std::string::npos);
  EXPECT_NE(json.find(R"("pid":2,"name":"process_name","args":{"name":"worker s0h0"})"),
            std::string::npos);
  EXPECT_NE(json.find(R"("name":"a \"quoted\"\u000aname")"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("ts":1.000,"dur":2.000)"), std::string::npos) << json;
  EXPECT_EQ(json.back(), '}');
}

// A caller that names no session gets every session's spans without their names.
TEST(TraceTest, AWindowOfNoSessionSeesNoSessionsNames) {
  const uint64_t window = Begin();
  { Scoped span("a tenant's request", "request", 5); }
  { Scoped span("a transfer", "transfer"); }
  std::vector<Span> spans = End(window, 0);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].name, "(another session)");
  EXPECT_EQ(spans[1].name, "a transfer");
}

}  // namespace
}  // namespace switchyard::trace
