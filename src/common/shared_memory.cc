#include "common/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "common/machine_memory.h"

namespace switchyard {
namespace {

int64_t PageSize() {
  static const int64_t page = sysconf(_SC_PAGESIZE);
  return page;
}

// Bytes kept by every pool of the process, against their common bound.
std::atomic<int64_t> kept_in_process{0};

int64_t KeptMax() {
  static const int64_t max = std::min<int64_t>(
      limits::kSharedFilesKeptMax, PhysicalMemoryBytes() / limits::kHostBytesKeptRamShare);
  return max;
}

}  // namespace

int64_t SharedMemoryFile::PartStart(int64_t end) {
  const int64_t page = PageSize();
  return (end + page - 1) / page * page;
}

absl::StatusOr<std::unique_ptr<SharedMemoryFile>> SharedMemoryFile::CreateOwned(const char* name,
                                                                                int64_t size) {
  if (size <= 0)
    return absl::InvalidArgumentError(absl::StrCat("a shared file of ", size, " bytes"));
  const int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("memfd_create: ", std::strerror(errno)));
  }
  std::unique_ptr<SharedMemoryFile> file(new SharedMemoryFile(fd, size));
  if (ftruncate(fd, size) != 0) {
    const int error = errno;
    return (error == ENOMEM || error == ENOSPC || error == EFBIG)
               ? absl::ResourceExhaustedError(absl::StrCat("cannot make a shared file of ", size,
                                                           " bytes: ", std::strerror(error)))
               : absl::UnavailableError(absl::StrCat("cannot size a shared file to ", size,
                                                     " bytes: ", std::strerror(error)));
  }
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot seal a shared file: ", std::strerror(errno)));
  }
  return file;
}

absl::StatusOr<std::shared_ptr<SharedMemoryFile>> SharedMemoryFile::Create(const char* name,
                                                                           int64_t size) {
  absl::StatusOr<std::unique_ptr<SharedMemoryFile>> file = CreateOwned(name, size);
  if (!file.ok()) return file.status();
  return std::shared_ptr<SharedMemoryFile>(std::move(*file));
}

SharedMemoryFile::~SharedMemoryFile() {
  absl::MutexLock lock(&mapping_mutex_);
  if (mapping_ != nullptr) munmap(mapping_, size_);
  close(fd_);
}

absl::StatusOr<std::unique_ptr<HostBytes>> SharedMemoryFile::MapPart(int64_t offset, int64_t size) {
  if (offset < 0 || size < 0 || offset % PageSize() != 0 || offset > size_ ||
      size > size_ - offset) {
    return absl::InvalidArgumentError(absl::StrCat("a part of ", size, " bytes at ", offset,
                                                   " of a shared file of ", size_, " bytes"));
  }
  if (size == 0) return HostBytes::Allocate(0);
  char* base;
  {
    absl::MutexLock lock(&mapping_mutex_);
    if (mapping_ == nullptr) {
      // Populated: mapping the pages in one go cost a seventh of a fault per page.
      void* mapped =
          mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, 0);
      if (mapped == MAP_FAILED) {
        return absl::UnavailableError(
            absl::StrCat("cannot map a shared file of ", size_, " bytes: ", std::strerror(errno)));
      }
      mapping_ = static_cast<char*>(mapped);
    }
    base = mapping_;
  }
  parts_.fetch_add(1);
  return HostBytes::Adopt(base + offset, size, [file = shared_from_this(), offset, size]() {
    if (file->parts_.fetch_sub(1) > 1) {
      (void)fallocate(file->fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset,
                      PartStart(size));
    }
  });
}

SharedMemoryPool::~SharedMemoryPool() {
  absl::MutexLock lock(&state_->mutex);
  state_->closed = true;
  kept_in_process -= state_->kept_bytes;
  state_->kept_bytes = 0;
  state_->kept.clear();
}

absl::StatusOr<std::shared_ptr<SharedMemoryFile>> SharedMemoryPool::Take(int64_t size) {
  std::unique_ptr<SharedMemoryFile> file;
  {
    absl::MutexLock lock(&state_->mutex);
    auto it = state_->kept.lower_bound(size);
    if (it != state_->kept.end() && it->first <= 2 * size) {
      file = std::move(it->second);
      state_->kept_bytes -= it->first;
      kept_in_process -= it->first;
      state_->kept.erase(it);
    }
  }
  if (file == nullptr) {
    absl::StatusOr<std::unique_ptr<SharedMemoryFile>> made =
        SharedMemoryFile::CreateOwned(state_->name.c_str(), size);
    if (!made.ok()) return made.status();
    file = *std::move(made);
  }
  std::weak_ptr<State> pool = state_;
  return std::shared_ptr<SharedMemoryFile>(file.release(), [pool](SharedMemoryFile* freed) {
    if (std::shared_ptr<State> state = pool.lock()) {
      state->Return(freed);
    } else {
      delete freed;
    }
  });
}

void SharedMemoryPool::State::Return(SharedMemoryFile* file) {
  std::unique_ptr<SharedMemoryFile> owned(file);  // closed unless kept
  const int64_t size = owned->size();
  absl::MutexLock lock(&mutex);
  if (closed) return;
  if (kept_in_process.fetch_add(size) + size > KeptMax()) {
    kept_in_process -= size;
    return;
  }
  kept.emplace(size, std::move(owned));
  kept_bytes += size;
}

int64_t SharedMemoryPool::kept_bytes() const {
  absl::MutexLock lock(&state_->mutex);
  return state_->kept_bytes;
}

int64_t SharedMemoryPool::KeptBytesInProcess() { return kept_in_process.load(); }

}  // namespace switchyard
