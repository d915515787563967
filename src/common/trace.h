#pragma once

// Spans of what a Switchyard process does (requests, launches, transfers, queue waits,
// storage), recorded only while a profile is being taken, and the Chrome trace format
// (JSON) that Perfetto and TensorBoard's profile plugin open. Process-wide; thread-safe.
// Recording costs one relaxed atomic load while no profile is taken.

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
  int64_t lane = 0;  // a row: a thread, or a device (DeviceLane)
};

// True while a profile is being taken.
bool Active();
// Begins recording (dropping what an earlier profile left); idempotent.
void Start();
// Stops recording; returns the spans, oldest first, and how many were dropped past
// the bound (limits::kTraceSpansMax).
std::vector<Span> Stop(int64_t* dropped = nullptr);
// Adds a span if a profile is being taken.
void Record(Span span);
void Record(absl::string_view name, absl::string_view category, absl::Time start, absl::Time end,
            int64_t lane);

// The calling thread's row (named by its thread name).
int64_t ThisThreadLane();
// The row of a device (global id), named "device N".
int64_t DeviceLane(int64_t device);
// Every row's name.
std::map<int64_t, std::string> LaneNames();

// Records [construction, destruction) on the calling thread's row.
class Scoped {
 public:
  Scoped(absl::string_view name, absl::string_view category)
      : active_(Active()), start_(active_ ? absl::Now() : absl::InfinitePast()) {
    if (active_) {
      name_ = std::string(name);
      category_ = std::string(category);
    }
  }
  ~Scoped() {
    if (active_) Record(name_, category_, start_, absl::Now(), ThisThreadLane());
  }
  Scoped(const Scoped&) = delete;
  Scoped& operator=(const Scoped&) = delete;

 private:
  const bool active_;
  const absl::Time start_;
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
