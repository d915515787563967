#pragma once

// Memory handed to a less trusted process to fill or read (a colocated Python sidecar)
// and mapped here without a copy: anonymous shared-memory files (memfd) whose size is
// sealed before the other process gets them. Mapping a file another process can shrink
// would let it kill this one (a read past the end is SIGBUS); a sealed one it can only
// read and write. Parts lie on page boundaries, so each maps as a buffer of its own.
//
// Fresh shared pages are expensive (here six times a fresh private page), so a pool
// keeps freed files for the next call of the same peer. A pool serves one peer only:
// that peer may keep a descriptor and write into the file later, so its files must
// never hold another peer's data.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/host_bytes.h"

namespace switchyard {

class SharedMemoryFile : public std::enable_shared_from_this<SharedMemoryFile> {
 public:
  // Where a part starts after one that ends at `end`: the next page boundary.
  static int64_t PartStart(int64_t end);

  // A new file of `size` bytes (> 0), sealed against shrinking, growing and further
  // seals. RESOURCE_EXHAUSTED or UNAVAILABLE with the reason.
  static absl::StatusOr<std::shared_ptr<SharedMemoryFile>> Create(const char* name, int64_t size);
  ~SharedMemoryFile();
  SharedMemoryFile(const SharedMemoryFile&) = delete;
  SharedMemoryFile& operator=(const SharedMemoryFile&) = delete;

  // To pass to the other process (SCM_RIGHTS); stays this object's.
  int fd() const { return fd_; }
  int64_t size() const { return size_; }

  // `size` bytes at `offset` (a PartStart; within the file) as a buffer, read and
  // write; the buffer keeps the file. The file is mapped whole at its first part, its
  // pages in at once, and stays mapped while it lives (a kept file's next use maps
  // nothing). A part freed while other parts of the file live gives its pages back (a
  // small output must not pin a large one's memory); the last keeps them for the file's
  // next use. INVALID_ARGUMENT for a part out of the file or off a page boundary;
  // UNAVAILABLE when the file cannot be mapped.
  absl::StatusOr<std::unique_ptr<HostBytes>> MapPart(int64_t offset, int64_t size)
      ABSL_LOCKS_EXCLUDED(mapping_mutex_);

 private:
  friend class SharedMemoryPool;
  SharedMemoryFile(int fd, int64_t size) : fd_(fd), size_(size) {}
  static absl::StatusOr<std::unique_ptr<SharedMemoryFile>> CreateOwned(const char* name,
                                                                       int64_t size);
  const int fd_;
  const int64_t size_;
  std::atomic<int> parts_{0};  // parts alive
  absl::Mutex mapping_mutex_;
  char* mapping_ ABSL_GUARDED_BY(mapping_mutex_) = nullptr;  // the whole file, once mapped
};

class SharedMemoryPool {
 public:
  explicit SharedMemoryPool(std::string name) : state_(std::make_shared<State>(std::move(name))) {}
  // Kept files close now; files in use close when their last holder lets go.
  ~SharedMemoryPool();
  SharedMemoryPool(const SharedMemoryPool&) = delete;
  SharedMemoryPool& operator=(const SharedMemoryPool&) = delete;

  // A file of at least `size` bytes (> 0): a kept one of at most twice that, or a new
  // one. Its bytes are whatever this pool's peer or this process left there. When its
  // last holder lets go it comes back to this pool if the process-wide bound on kept
  // files (limits::kSharedFilesKeptMax, a share of RAM) has room, else it closes.
  absl::StatusOr<std::shared_ptr<SharedMemoryFile>> Take(int64_t size);

  // Bytes of files kept by this pool; by every pool of the process.
  int64_t kept_bytes() const;
  static int64_t KeptBytesInProcess();

 private:
  struct State {
    explicit State(std::string name) : name(std::move(name)) {}
    void Return(SharedMemoryFile* file) ABSL_LOCKS_EXCLUDED(mutex);
    const std::string name;
    mutable absl::Mutex mutex;
    std::multimap<int64_t, std::unique_ptr<SharedMemoryFile>> kept ABSL_GUARDED_BY(mutex);
    int64_t kept_bytes ABSL_GUARDED_BY(mutex) = 0;
    bool closed ABSL_GUARDED_BY(mutex) = false;  // the pool has gone
  };
  std::shared_ptr<State> state_;
};

}  // namespace switchyard
