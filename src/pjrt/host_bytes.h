#pragma once

// Bytes on their way to a device, aligned so that a plugin may use them in place:
// XLA's CPU client aliases host data aligned to 64 bytes instead of copying it.

#include <cstddef>
#include <new>

#include "absl/types/span.h"

namespace switchyard::pjrt {

class HostBytes {
 public:
  static constexpr size_t kAlignment = 64;

  // Uninitialized.
  explicit HostBytes(size_t size)
      : size_(size),
        data_(static_cast<char*>(::operator new(size == 0 ? 1 : size,
                                                std::align_val_t(kAlignment)))) {}
  ~HostBytes() { ::operator delete(data_, std::align_val_t(kAlignment)); }
  HostBytes(const HostBytes&) = delete;
  HostBytes& operator=(const HostBytes&) = delete;

  char* data() { return data_; }
  const char* data() const { return data_; }
  size_t size() const { return size_; }
  absl::Span<const char> span() const { return {data_, size_}; }

 private:
  size_t size_;
  char* data_;
};

}  // namespace switchyard::pjrt
