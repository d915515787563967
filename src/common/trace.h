#pragma once

// Spans of what a Switchyard process does (requests, launches, transfers, queue waits,
// storage), recorded only while a profile is being taken, and the Chrome trace format
// (JSON) that Perfetto and TensorBoard's profile plugin open. Process-wide; thread-safe.
// Recording costs one relaxed atomic load while no profile is taken.
//
// Several profiles may be taken at once (sessions of different proxies on one worker,
// or of one proxy): each is a window, from Begin to End, that gets the spans recorded
// meanwhile; a span tied to another session comes back without its name.

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace switchyard::trace {

struct Span {
  std::string name;
  std::string category;  // "request", "launch", "queue", "storage", "transfer" ...
  int64_t start_unix_ns = 0;
  int64_t duration_ns = 0;
  int64_t lane = 0;      // a row: a thread, or a device (DeviceLane)
  uint64_t session = 0;  // the proxy session it served; 0: none in particular
};

// True while a profile is being taken.
bool Active();
// Opens a window (a profile) and returns its id.
uint64_t Begin();
// Closes window `window` and returns the spans that began in it, oldest first, with the
// names of spans of sessions other than `session` replaced by "(another session)" (all
// of them kept when `session` is 0); and how many were dropped past the bound
// (limits::kTraceSpansMax). Empty for an unknown window.
std::vector<Span> End(uint64_t window, uint64_t session, int64_t* dropped = nullptr);
// Adds a span if a profile is being taken.
void Record(Span span);
void Record(absl::string_view name, absl::string_view category, absl::Time start, absl::Time end,
            int64_t lane, uint64_t session = 0);

// The calling thread's row (named by its thread name).
int64_t ThisThreadLane();
// The row of a device (global id), named "device N".
int64_t DeviceLane(int64_t device);
// Every row's name.
std::map<int64_t, std::string> LaneNames();

// Records [construction, destruction) on the calling thread's row.
class Scoped {
 public:
  Scoped(absl::string_view name, absl::string_view category, uint64_t session = 0)
      : active_(Active()), start_(active_ ? absl::Now() : absl::InfinitePast()), session_(session) {
    if (active_) {
      name_ = std::string(name);
      category_ = std::string(category);
    }
  }
  ~Scoped() {
    if (active_) Record(name_, category_, start_, absl::Now(), ThisThreadLane(), session_);
  }
  Scoped(const Scoped&) = delete;
  Scoped& operator=(const Scoped&) = delete;

 private:
  const bool active_;
  const absl::Time start_;
  const uint64_t session_;
  std::string name_, category_;
};

// One process's part of a trace file.
struct ProcessTrace {
  std::string name;  // "proxy", "worker s0h0 (host:port)"
  std::vector<Span> spans;
  std::map<int64_t, std::string> lanes;
};

// The Chrome trace event format: one process row per entry, its lanes as threads.
std::string ChromeTraceJson(const std::vector<ProcessTrace>& processes);

}  // namespace switchyard::trace
