#pragma once

#include <cstdint>

// A byte buffer for bulk data on its way between hosts and devices: uninitialized,
// aligned so that a PJRT plugin may use it in place (XLA's CPU client aliases host
// data aligned to 64 bytes instead of copying it), and, when large, backed by huge
// pages where they pay (common/huge_pages.h): fresh memory costs a page fault per page
// on first touch, and those faults, not the copies, dominated moving a GiB. Large ones
// reuse the memory of freed ones of about their size (within limits::kHostBytesKeptMax),
// whose pages are already there. Like malloc's, the bytes of a new buffer are whatever was
// there: write before reading, and never hand out a part not written.

#include <cstddef>
#include <memory>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace switchyard {

class HostBytes {
 public:
  static constexpr size_t kAlignment = 64;

  // Throws std::bad_alloc when memory runs out: for sizes that come from a peer, use
  // `Allocate`.
  explicit HostBytes(size_t size);
  // RESOURCE_EXHAUSTED, naming the size, when the memory cannot be had.
  static absl::StatusOr<std::unique_ptr<HostBytes>> Allocate(size_t size);
  // Memory mapped by someone else (common/shared_memory.h): `release` runs once, when
  // the buffer is freed. `data` must be aligned to kAlignment.
  static std::unique_ptr<HostBytes> Adopt(char* data, size_t size,
                                          absl::AnyInvocable<void() &&> release);
  ~HostBytes();
  HostBytes(const HostBytes&) = delete;
  HostBytes& operator=(const HostBytes&) = delete;

  // Bytes of freed buffers kept for reuse, process-wide.
  static size_t KeptBytes();
  // Unmaps those kept unused for limits::kHostBytesKeptIdleMs before `now`, so a
  // process that stopped moving data gives their pages back (MADV_FREE pages count as
  // resident until the kernel needs them); the bytes unmapped.
  static size_t ReleaseIdleKept(absl::Time now);

  // Gives the pages wholly inside [offset, offset + length) back to the kernel now: a
  // buffer streamed through (an upload forwarded as it arrives) holds only its window.
  // They read as zero afterwards. Only for a large buffer with a mapping of its own; a
  // no-op for others.
  void DropPages(size_t offset, size_t length);
  // Moves the pages of [from, from + length) to [to, to + length), which must not
  // overlap, without copying or faulting: the source reads as zero afterwards, the
  // destination holds what the source held. A window streamed through a large buffer
  // reuses its pages ahead of the writer this way instead of faulting in fresh ones
  // (which cost a third of an upload's speed). Page-aligned, within the buffer, its own
  // mapping; false when it cannot (nothing moved: then `DropPages`).
  bool MovePages(size_t from, size_t to, size_t length);

  char* data() { return data_; }
  const char* data() const { return data_; }
  size_t size() const { return size_; }
  absl::Span<const char> span() const { return {data_, size_}; }

 private:
  HostBytes(char* data, size_t size, absl::AnyInvocable<void() &&> release)
      : size_(size), data_(data), release_(std::move(release)) {}

  size_t size_;
  char* data_;
  absl::AnyInvocable<void() &&> release_;  // adopted memory
  void* mapping_ = nullptr;                // a mapping of its own, when large
  size_t mapping_size_ = 0;
};

}  // namespace switchyard
