#include "common/heap_trim.h"

#include <malloc.h>

#include <utility>

#include "common/host_bytes.h"
#include "common/logging.h"
#include "common/machine_memory.h"
#include "common/thread_name.h"

namespace switchyard {
namespace {

constexpr absl::Duration kTick = absl::Milliseconds(500);
constexpr int64_t kWorthLoggingBytes = int64_t{16} << 20;

}  // namespace

bool HeapTrimPolicy::Due(absl::Time now, int64_t work, int64_t freed) {
  if (work != work_) {
    work_ = work;
    work_moved_ = now;
    return false;
  }
  return freed - freed_at_trim_ >= options_.min_freed && now - work_moved_ >= options_.quiet &&
         now - trimmed_ >= options_.min_interval;
}

void HeapTrimPolicy::Trimmed(absl::Time now, int64_t freed) {
  trimmed_ = now;
  freed_at_trim_ = freed;
}

int64_t TrimHeap() {
  const int64_t before = ResidentBytes();
  malloc_trim(0);
  return before - ResidentBytes();
}

HeapTrimmer::HeapTrimmer(std::function<int64_t()> work, std::function<int64_t()> freed,
                         HeapTrimPolicy::Options options)
    : thread_([this, work = std::move(work), freed = std::move(freed), options] {
        NameThisThread("sy-heap-trim");
        HeapTrimPolicy policy(options);
        while (!stop_.WaitForNotificationWithTimeout(kTick)) {
          if (const size_t unmapped = HostBytes::ReleaseIdleKept(absl::Now());
              static_cast<int64_t>(unmapped) >= kWorthLoggingBytes) {
            SY_LOG(Info) << "unmapped " << (unmapped >> 20)
                         << " MiB of host buffers kept for reuse (unused for "
                         << limits::kHostBytesKeptIdleMs / 1000 << " s)";
          }
          const int64_t freed_now = freed();
          if (!policy.Due(absl::Now(), work(), freed_now)) continue;
          const absl::Time started = absl::Now();
          const int64_t released = TrimHeap();
          policy.Trimmed(absl::Now(), freed_now);
          if (released >= kWorthLoggingBytes) {
            SY_LOG(Info) << "gave " << (released >> 20)
                         << " MiB of freed heap back to the system (idle after freeing; took "
                         << absl::FormatDuration(
                                absl::Trunc(absl::Now() - started, absl::Milliseconds(1)))
                         << ")";
          }
        }
      }) {}

HeapTrimmer::~HeapTrimmer() {
  stop_.Notify();
  thread_.join();
}

}  // namespace switchyard
