#include "proxy/large_transfer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace switchyard::proxy {
namespace {

// Copied into the buffer in pieces of this size, each usable (forwarded to a worker)
// as soon as it is in.
constexpr int64_t kPieceBytes = 8 << 20;

}  // namespace

std::string LargeTransferPath(absl::string_view directory, uint64_t handle) {
  return absl::StrCat(directory, "/lt_", static_cast<int32_t>(handle));
}

absl::StatusOr<LargeTransferFile> LargeTransferFile::Open(const std::string& path, int64_t size) {
  // Not blocking: a FIFO planted under the name must not hold the proxy.
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) {
      return absl::NotFoundError(absl::StrCat(
          "no file ", path,
          ": a client using the large-transfer directory must run on the proxy's host and name "
          "the directory of the proxy's --large_transfer_directory"));
    }
    unlink(path.c_str());
    return absl::InvalidArgumentError(absl::StrCat("open ", path, ": ", std::strerror(error)));
  }
  LargeTransferFile file(fd, path, size);
  unlink(path.c_str());
  struct stat info;
  if (fstat(fd, &info) != 0) {
    return absl::InternalError(absl::StrCat("stat ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  if (info.st_size != size) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " has ", info.st_size, " bytes; the host buffer has ", size));
  }
  return file;
}

LargeTransferFile::~LargeTransferFile() {
  if (fd_ >= 0) close(fd_);
}

absl::Status LargeTransferFile::ReadInto(HostBuffer& buffer) {
  // Read, not mapped: the client may still hold the file and cut it short, and a
  // mapping read past the new end kills the proxy (SIGBUS); a read just ends early.
  // One copy either way, from the page cache straight into the buffer's space.
  absl::Status status;
  const absl::Span<char> space = buffer.Space();
  if (static_cast<int64_t>(space.size()) != size_) {
    status = absl::InternalError("a large transfer's host buffer has no space of its size");
  }
  int64_t done = 0;
  while (status.ok() && done < size_) {
    const ssize_t n =
        pread(fd_, space.data() + done,
              static_cast<size_t>(std::min<int64_t>(kPieceBytes, size_ - done)), done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = absl::InternalError(absl::StrCat("read ", path_, ": ", std::strerror(errno)));
    } else if (n == 0) {
      status = absl::DataLossError(absl::StrCat(path_, " ended at ", done, " of ", size_,
                                                " bytes: the client changed it while it was read"));
    } else {
      done += n;
      status = buffer.Arrived(done);
    }
  }
  buffer.Finish(status);
  return status;
}

}  // namespace switchyard::proxy
