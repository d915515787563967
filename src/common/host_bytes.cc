#include "common/host_bytes.h"

#include <sys/mman.h>

#include <cstdint>
#include <new>

#include "absl/strings/str_cat.h"

namespace switchyard {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

HostBytes::HostBytes(size_t size) : size_(size), data_(nullptr) {
  if (size >= kHugePage) {
    // One extra huge page of slack to start on a huge-page boundary.
    const size_t length = (size + 2 * kHugePage - 1) / kHugePage * kHugePage;
    void* mapping =
        mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapping != MAP_FAILED) {
      mapping_ = mapping;
      mapping_size_ = length;
      const auto start = reinterpret_cast<uintptr_t>(mapping);
      data_ = reinterpret_cast<char*>((start + kHugePage - 1) / kHugePage * kHugePage);
      (void)madvise(data_, length - (data_ - static_cast<char*>(mapping)), MADV_HUGEPAGE);
      return;
    }
  }
  data_ = static_cast<char*>(::operator new(size == 0 ? 1 : size, std::align_val_t(kAlignment)));
}

absl::StatusOr<std::unique_ptr<HostBytes>> HostBytes::Allocate(size_t size) {
  try {
    return std::make_unique<HostBytes>(size);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", size, " bytes of host memory"));
  }
}

HostBytes::~HostBytes() {
  if (mapping_ != nullptr) {
    munmap(mapping_, mapping_size_);
  } else {
    ::operator delete(data_, std::align_val_t(kAlignment));
  }
}

}  // namespace switchyard
