#include "common/trace.h"

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace switchyard::trace {
namespace {

TEST(TraceTest, RecordsOnlyWhileActive) {
  Record("before", "test", absl::Now(), absl::Now(), ThisThreadLane());
  Start();
  EXPECT_TRUE(Active());
  { Scoped span("inside", "test"); }
  Record("launch", "launch", absl::FromUnixMicros(10), absl::FromUnixMicros(25), DeviceLane(3));
  int64_t dropped = -1;
  std::vector<Span> spans = Stop(&dropped);
  EXPECT_FALSE(Active());
  Record("after", "test", absl::Now(), absl::Now(), ThisThreadLane());
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].name, "inside");
  EXPECT_EQ(spans[1].start_unix_ns, 10000);
  EXPECT_EQ(spans[1].duration_ns, 15000);
  EXPECT_EQ(dropped, 0);
  EXPECT_EQ(LaneNames().at(DeviceLane(3)), "device 3");
  EXPECT_TRUE(Stop().empty());  // a second stop has nothing
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

}  // namespace
}  // namespace switchyard::trace
