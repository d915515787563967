#include "common/host_bytes.h"

#include <sys/mman.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <new>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/huge_pages.h"
#include "common/limits.h"
#include "common/machine_memory.h"

namespace switchyard {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
// From this size a buffer has a mapping of its own, kept for reuse when freed: a batch of
// many arrays moved between slices (a model's weights, 0.5-4 MiB each) otherwise faulted
// in fresh pages for every one (malloc gives such sizes back at free).
constexpr size_t kMappedMin = limits::kBulkMinBytes;
constexpr size_t kMappedGrain = size_t{64} << 10;

// Mappings of freed buffers, kept for the next buffer of about their size: its pages
// are already there, where fresh ones cost the kernel a page clear each (the largest
// cost of moving a buffer on the machines we measured). Bounded by
// limits::kHostBytesKeptMax and a share of RAM; kept mappings are MADV_FREE, so the
// kernel takes their pages back under memory pressure (a reuse then faults as a fresh
// mapping would).
class KeptMappings {
 public:
  static KeptMappings& Get() {
    static KeptMappings* kept = new KeptMappings();  // never destroyed: buffers outlive exit
    return *kept;
  }
  // A kept mapping of at least `length` bytes and at most a quarter more (its length
  // in `*taken`); null when none fits.
  void* Take(size_t length, size_t* taken) ABSL_LOCKS_EXCLUDED(mutex_) {
    absl::MutexLock lock(&mutex_);
    auto it = kept_.lower_bound(length);
    if (it == kept_.end() || it->first > length + length / 4) return nullptr;
    void* mapping = it->second.mapping;
    *taken = it->first;
    bytes_ -= it->first;
    kept_.erase(it);
    return mapping;
  }
  // False when it does not fit in the bound: the caller unmaps it.
  bool Keep(void* mapping, size_t length) ABSL_LOCKS_EXCLUDED(mutex_) {
    absl::MutexLock lock(&mutex_);
    if (bytes_ + length > max_) return false;
    (void)madvise(mapping, length, MADV_FREE);
    kept_.emplace(length, Kept{mapping, absl::Now()});
    bytes_ += length;
    return true;
  }
  // Unmaps those kept since `idle` before `now`; the bytes unmapped.
  size_t ReleaseIdle(absl::Time now, absl::Duration idle) ABSL_LOCKS_EXCLUDED(mutex_) {
    std::vector<std::pair<void*, size_t>> idle_ones;
    {
      absl::MutexLock lock(&mutex_);
      for (auto it = kept_.begin(); it != kept_.end();) {
        if (now - it->second.since < idle) {
          ++it;
          continue;
        }
        idle_ones.emplace_back(it->second.mapping, it->first);
        bytes_ -= it->first;
        it = kept_.erase(it);
      }
    }
    size_t released = 0;
    for (auto [mapping, length] : idle_ones) {  // outside the lock: an unmap takes a while
      munmap(mapping, length);
      released += length;
    }
    return released;
  }
  size_t bytes() const ABSL_LOCKS_EXCLUDED(mutex_) {
    absl::MutexLock lock(&mutex_);
    return bytes_;
  }

 private:
  KeptMappings() {
    const size_t ram = static_cast<size_t>(PhysicalMemoryBytes());
    max_ = std::min<size_t>(limits::kHostBytesKeptMax, ram / limits::kHostBytesKeptRamShare);
  }
  size_t max_ = 0;
  mutable absl::Mutex mutex_;
  struct Kept {
    void* mapping;
    absl::Time since;
  };
  std::multimap<size_t, Kept> kept_ ABSL_GUARDED_BY(mutex_);
  size_t bytes_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace

HostBytes::HostBytes(size_t size) : size_(size), data_(nullptr) {
  if (size >= kMappedMin) {
    // A huge one: one extra huge page of slack to start on a huge-page boundary.
    const bool huge = size >= kHugePage;
    const size_t grain = huge ? kHugePage : kMappedGrain;
    const size_t length = (size + (huge ? kHugePage : 0) + grain - 1) / grain * grain;
    size_t taken = 0;
    void* mapping = KeptMappings::Get().Take(length, &taken);
    if (mapping == nullptr) {
      mapping = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      taken = length;
    }
    if (mapping != MAP_FAILED) {
      mapping_ = mapping;
      mapping_size_ = taken;
      const auto start = reinterpret_cast<uintptr_t>(mapping);
      data_ = huge ? reinterpret_cast<char*>((start + kHugePage - 1) / kHugePage * kHugePage)
                   : static_cast<char*>(mapping);
      if (huge && HostHugePages().use) {
        (void)madvise(data_, taken - (data_ - static_cast<char*>(mapping)), MADV_HUGEPAGE);
      }
      return;
    }
  }
  data_ = static_cast<char*>(::operator new(size == 0 ? 1 : size, std::align_val_t(kAlignment)));
}

void HostBytes::DropPages(size_t offset, size_t length) {
  if (mapping_ == nullptr || offset >= size_) return;
  length = std::min(length, size_ - offset);
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<uintptr_t>(data_ + offset);
  const uintptr_t first = (start + page - 1) / page * page;
  const uintptr_t end = (start + length) / page * page;
  if (end > first) (void)madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
}

bool HostBytes::MovePages(size_t from, size_t to, size_t length) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (mapping_ == nullptr || length == 0 || from % page != 0 || to % page != 0 ||
      length % page != 0 || reinterpret_cast<uintptr_t>(data_) % page != 0 ||
      from + length > size_ || to + length > size_ || (from < to + length && to < from + length)) {
    return false;
  }
  // MREMAP_DONTUNMAP leaves the source mapped (reading as zero): the buffer has no hole
  // another mapping could land in.
  void* moved = mremap(data_ + from, length, length,
                       MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, data_ + to);
  return moved != MAP_FAILED;
}

size_t HostBytes::KeptBytes() { return KeptMappings::Get().bytes(); }

size_t HostBytes::ReleaseIdleKept(absl::Time now) {
  return KeptMappings::Get().ReleaseIdle(now, absl::Milliseconds(limits::kHostBytesKeptIdleMs));
}

absl::StatusOr<std::unique_ptr<HostBytes>> HostBytes::Allocate(size_t size) {
  try {
    return std::make_unique<HostBytes>(size);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", size, " bytes of host memory"));
  }
}

std::unique_ptr<HostBytes> HostBytes::Adopt(char* data, size_t size,
                                            absl::AnyInvocable<void() &&> release) {
  return std::unique_ptr<HostBytes>(new HostBytes(data, size, std::move(release)));
}

HostBytes::~HostBytes() {
  if (release_ != nullptr) {
    std::move(release_)();
  } else if (mapping_ != nullptr) {
    if (!KeptMappings::Get().Keep(mapping_, mapping_size_)) munmap(mapping_, mapping_size_);
  } else {
    ::operator delete(data_, std::align_val_t(kAlignment));
  }
}

}  // namespace switchyard
