#pragma once

// Gives the allocator's free memory back to the kernel at quiet moments. glibc keeps
// what a process frees in its arenas unless it lies at the top of a heap: a proxy or
// worker that held 100k small arrays for a session kept 60-700 MiB after the session
// ended, and more after each such session (measured: proxy 87 -> 276 MiB and worker
// 0.8 -> 1.3 GiB over five rounds; a malloc_trim brought them back to 25 and 260 MiB).
// A trim walks every free chunk under the arena locks (150-200 ms for a heap of 1M
// free chunks), so it runs only when something was let go of and the process has been
// idle for a while, never in the middle of work.

#include <cstdint>
#include <functional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/limits.h"

namespace switchyard {

// When to trim. Pure logic, time passed in; not thread-safe.
class HeapTrimPolicy {
 public:
  struct Options {
    int64_t min_freed = 1;  // in the units of `freed`
    absl::Duration quiet = absl::Milliseconds(limits::kHeapTrimQuietMs);
    absl::Duration min_interval = absl::Milliseconds(limits::kHeapTrimIntervalMinMs);
  };
  explicit HeapTrimPolicy(Options options) : options_(options) {}

  // `work` grows with every piece of work the process does, `freed` with what it lets
  // go of (sessions ended, buffers deleted). True when `min_freed` more were let go of
  // since the last trim, `work` has not moved for `quiet`, and the last trim is
  // `min_interval` ago; the caller then trims and calls `Trimmed`.
  bool Due(absl::Time now, int64_t work, int64_t freed);
  void Trimmed(absl::Time now, int64_t freed);

 private:
  const Options options_;
  int64_t work_ = -1;
  absl::Time work_moved_ = absl::InfinitePast();
  int64_t freed_at_trim_ = 0;
  absl::Time trimmed_ = absl::InfinitePast();
};

// Runs a HeapTrimPolicy on a thread of its own (sy-heap-trim), twice a second, and
// trims (malloc_trim) when it is due, logging what came back; each tick also unmaps
// the idle host buffers kept for reuse (HostBytes::ReleaseIdleKept). `work` and `freed` are
// called on that thread.
class HeapTrimmer {
 public:
  HeapTrimmer(std::function<int64_t()> work, std::function<int64_t()> freed,
              HeapTrimPolicy::Options options);
  ~HeapTrimmer();  // stops the thread
  HeapTrimmer(const HeapTrimmer&) = delete;
  HeapTrimmer& operator=(const HeapTrimmer&) = delete;

 private:
  absl::Notification stop_;
  std::thread thread_;
};

// malloc_trim(0); the resident bytes it gave back.
int64_t TrimHeap();

}  // namespace switchyard
