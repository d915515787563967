#include "common/trace.h"

#include <pthread.h>

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/limits.h"

namespace switchyard::trace {
namespace {

// Device rows are numbered apart from threads' so neither takes the other's.
constexpr int64_t kDeviceLaneBase = int64_t{1} << 20;

std::atomic<bool> active{false};

struct Recorder {
  absl::Mutex mutex;
  std::vector<Span> spans ABSL_GUARDED_BY(mutex);  // in order of recording
  int64_t dropped ABSL_GUARDED_BY(mutex) = 0;      // since the oldest open window began
  // Open windows: id -> when it began (unix ns).
  std::map<uint64_t, int64_t> windows ABSL_GUARDED_BY(mutex);
  uint64_t next_window ABSL_GUARDED_BY(mutex) = 1;
  std::map<int64_t, std::string> lanes ABSL_GUARDED_BY(mutex);
  int64_t next_lane ABSL_GUARDED_BY(mutex) = 1;
};

Recorder& Global() {
  static Recorder* recorder = new Recorder();  // never destroyed: threads outlive main
  return *recorder;
}

// JSON string contents: quotes, backslashes and control characters escaped.
std::string Escape(absl::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

}  // namespace

bool Active() { return active.load(std::memory_order_relaxed); }

uint64_t Begin() {
  Recorder& recorder = Global();
  absl::MutexLock lock(&recorder.mutex);
  const uint64_t window = recorder.next_window++;
  recorder.windows[window] = absl::GetCurrentTimeNanos();
  active.store(true);
  return window;
}

std::vector<Span> End(uint64_t window, uint64_t session, int64_t* dropped) {
  Recorder& recorder = Global();
  absl::MutexLock lock(&recorder.mutex);
  if (dropped != nullptr) *dropped = 0;
  auto it = recorder.windows.find(window);
  if (it == recorder.windows.end()) return {};
  const int64_t began = it->second;
  recorder.windows.erase(it);
  std::vector<Span> spans;
  for (const Span& span : recorder.spans) {
    if (span.start_unix_ns < began) continue;
    spans.push_back(span);
    // A caller naming no session (0) sees no session's names: anyone who reaches a
    // worker's port can ask.
    if (span.session != 0 && span.session != session) {
      spans.back().name = "(another session)";
    }
  }
  if (dropped != nullptr) *dropped = recorder.dropped;
  if (recorder.windows.empty()) {
    active.store(false);
    recorder.spans.clear();
    recorder.dropped = 0;
  } else {
    // What no open window needs any more.
    int64_t first = std::numeric_limits<int64_t>::max();
    for (const auto& [id, start] : recorder.windows) first = std::min(first, start);
    std::erase_if(recorder.spans, [first](const Span& span) { return span.start_unix_ns < first; });
  }
  return spans;
}

void Record(Span span) {
  if (!Active()) return;
  Recorder& recorder = Global();
  absl::MutexLock lock(&recorder.mutex);
  if (static_cast<int64_t>(recorder.spans.size()) >= limits::kTraceSpansMax) {
    ++recorder.dropped;
    return;
  }
  recorder.spans.push_back(std::move(span));
}

void Record(absl::string_view name, absl::string_view category, absl::Time start, absl::Time end,
            int64_t lane, uint64_t session) {
  if (!Active()) return;
  Record(Span{std::string(name), std::string(category), absl::ToUnixNanos(start),
              absl::ToInt64Nanoseconds(end - start), lane, session});
}

int64_t ThisThreadLane() {
  thread_local int64_t lane = 0;
  if (lane != 0) return lane;
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  Recorder& recorder = Global();
  absl::MutexLock lock(&recorder.mutex);
  lane = recorder.next_lane++;
  recorder.lanes[lane] = name[0] != '\0' ? name : absl::StrCat("thread ", lane);
  return lane;
}

int64_t DeviceLane(int64_t device) {
  const int64_t lane = kDeviceLaneBase + device;
  Recorder& recorder = Global();
  absl::MutexLock lock(&recorder.mutex);
  if (!recorder.lanes.count(lane)) recorder.lanes[lane] = absl::StrCat("device ", device);
  return lane;
}

std::map<int64_t, std::string> LaneNames() {
  Recorder& recorder = Global();
  absl::MutexLock lock(&recorder.mutex);
  return recorder.lanes;
}

std::string ChromeTraceJson(const std::vector<ProcessTrace>& processes) {
  std::string out = R"({"displayTimeUnit":"ms","traceEvents":[)";
  bool first = true;
  auto event = [&](const std::string& json) {
    if (!first) out.push_back(',');
    first = false;
    out += json;
  };
  for (size_t p = 0; p < processes.size(); ++p) {
    const ProcessTrace& process = processes[p];
    const int64_t pid = static_cast<int64_t>(p) + 1;
    event(absl::StrFormat(R"({"ph":"M","pid":%d,"name":"process_name","args":{"name":"%s"}})", pid,
                          Escape(process.name)));
    event(absl::StrFormat(
        R"({"ph":"M","pid":%d,"name":"process_sort_index","args":{"sort_index":%d}})", pid, pid));
    for (const auto& [lane, name] : process.lanes) {
      event(absl::StrFormat(
          R"({"ph":"M","pid":%d,"tid":%d,"name":"thread_name","args":{"name":"%s"}})", pid, lane,
          Escape(name)));
    }
    for (const Span& span : process.spans) {
      event(absl::StrFormat(
          R"({"ph":"X","pid":%d,"tid":%d,"name":"%s","cat":"%s","ts":%.3f,"dur":%.3f})", pid,
          span.lane, Escape(span.name), Escape(span.category), span.start_unix_ns / 1e3,
          span.duration_ns / 1e3));
    }
  }
  out += "]}";
  return out;
}

}  // namespace switchyard::trace
