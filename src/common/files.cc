#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"

namespace switchyard {
namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no file ", path));
    return Errno("cannot open", path);
  }
  absl::Cleanup closer = [fd] { close(fd); };
  std::string out;
  char buffer[1 << 16];
  while (true) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("cannot read", path);
    }
    if (n == 0) return out;
    out.append(buffer, n);
  }
}

absl::Status MakeDirectories(const std::string& dir) {
  for (size_t slash = 1; slash <= dir.size(); ++slash) {
    if (slash != dir.size() && dir[slash] != '/') continue;
    const std::string prefix = dir.substr(0, slash);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) return Errno("cannot create", prefix);
  }
  return absl::OkStatus();
}

absl::Status WriteGzipFile(const std::string& path, absl::string_view contents) {
  z_stream stream{};
  // 15 + 16: a gzip header and trailer around the deflate stream.
  if (deflateInit2(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    return absl::InternalError("zlib: deflateInit2 failed");
  }
  std::string out(deflateBound(&stream, contents.size()), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(contents.data()));
  stream.avail_in = static_cast<uInt>(contents.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  const int result = deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  if (result != Z_STREAM_END) return absl::InternalError("zlib: deflate did not finish");
  return WriteFileAtomically(path, out);
}

absl::Status ReadFileInto(const std::string& path, absl::Span<char> out) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no file ", path));
    return Errno("cannot open", path);
  }
  absl::Cleanup closer = [fd] { close(fd); };
  struct stat info;
  if (fstat(fd, &info) != 0) return Errno("cannot stat", path);
  if (static_cast<uint64_t>(info.st_size) != out.size()) {
    return absl::OutOfRangeError(
        absl::StrCat(path, " has ", info.st_size, " bytes, not ", out.size()));
  }
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = read(fd, out.data() + done, out.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("cannot read", path);
    }
    if (n == 0) return absl::OutOfRangeError(absl::StrCat(path, " ended early"));
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  // Unique per writer: processes on several hosts may write one path on shared storage.
  static std::atomic<uint64_t> next{0};
  char host[64] = {};
  gethostname(host, sizeof(host) - 1);
  const std::string temporary =
      absl::StrCat(path, ".tmp.", host, ".", getpid(), ".", next.fetch_add(1));
  int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", temporary);
  size_t written = 0;
  while (written < contents.size()) {
    ssize_t n = write(fd, contents.data() + written, contents.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status status = Errno("cannot write", temporary);
      close(fd);
      unlink(temporary.c_str());
      return status;
    }
    written += n;
  }
  const bool synced = fsync(fd) == 0;
  if (close(fd) != 0 || !synced) {
    absl::Status status = Errno("cannot sync", temporary);
    unlink(temporary.c_str());
    return status;
  }
  if (rename(temporary.c_str(), path.c_str()) != 0) {
    absl::Status status = Errno("cannot rename onto", path);
    unlink(temporary.c_str());
    return status;
  }
  return absl::OkStatus();
}

}  // namespace switchyard
