#include "common/unix_listener.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/accept.h"
#include "common/logging.h"
#include "common/thread_name.h"
#include "grpcpp/server.h"
#include "grpcpp/server_posix.h"

namespace switchyard {
namespace {

// Who is at the other end of each accepted descriptor. An entry is replaced when the
// kernel gives its number to a new connection (the old one was closed by then), so the
// table never holds more entries than the process has descriptors.
struct Peers {
  absl::Mutex mutex;
  absl::flat_hash_map<int, PeerCredentials> by_fd ABSL_GUARDED_BY(mutex);
};

Peers& AcceptedPeers() {
  static auto* peers = new Peers;  // never destroyed: used until exit
  return *peers;
}

std::string Errno(absl::string_view what) { return absl::StrCat(what, ": ", std::strerror(errno)); }

// OK when nobody but us (or root) can add or remove names in `directory`.
absl::Status CheckDirectory(const std::string& directory) {
  struct stat st;
  if (stat(directory.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the socket's directory ", directory, ": ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(directory, " is not a directory"));
  }
  if ((st.st_uid != geteuid() && st.st_uid != 0) || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the socket's directory ", directory, " can be written by other users (mode ",
                     absl::StrCat(absl::Hex(st.st_mode & 07777)), ", owner uid ", st.st_uid,
                     "): put the socket in a directory of your own (mode 0700)"));
  }
  return absl::OkStatus();
}

// Makes room at `path`: a socket nobody answers on any more is removed; a live one
// is UNAVAILABLE.
absl::Status ClearStaleSocket(const std::string& path, const sockaddr_un& address) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return absl::OkStatus();  // nothing there
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " exists and is not a socket"));
  }
  const int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe < 0) return absl::UnavailableError(Errno("socket"));
  const bool live =
      connect(probe, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
  close(probe);
  if (live) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", path, ": another process serves it"));
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::UnavailableError(Errno(absl::StrCat("cannot remove the stale socket ", path)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Start(const std::string& path,
                                                                  grpc::Server* server) {
  return Start(path, [server](int fd, const PeerCredentials& peer) {
    {
      Peers& peers = AcceptedPeers();
      absl::MutexLock lock(&peers.mutex);
      peers.by_fd[fd] = peer;
    }
    grpc::AddInsecureChannelFromFd(server, fd);  // the server owns `fd` from here
  });
}

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Start(const std::string& path,
                                                                  Take take) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path[0] != '/' || path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a Unix socket path must be absolute and shorter than ",
                     sizeof(address.sun_path), " bytes: '", path, "'"));
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  const size_t slash = path.rfind('/');
  if (absl::Status directory = CheckDirectory(slash == 0 ? "/" : path.substr(0, slash));
      !directory.ok()) {
    return directory;
  }
  if (absl::Status cleared = ClearStaleSocket(path, address); !cleared.ok()) return cleared;
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(Errno("socket"));
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    const std::string error = Errno(absl::StrCat("cannot listen on ", path));
    close(fd);
    return absl::UnavailableError(error);
  }
  // Until this chmod another user could connect (if the directory lets them in); the
  // credentials check below refuses them either way.
  struct stat st;
  if (chmod(path.c_str(), 0600) != 0 || stat(path.c_str(), &st) != 0 ||
      listen(fd, SOMAXCONN) != 0) {
    const std::string error = Errno(absl::StrCat("cannot listen on ", path));
    close(fd);
    unlink(path.c_str());
    return absl::UnavailableError(error);
  }
  std::unique_ptr<UnixListener> listener(new UnixListener(path, fd, std::move(take), st.st_ino));
  listener->thread_ = std::thread([raw = listener.get()] { raw->AcceptLoop(); });
  return listener;
}

UnixListener::~UnixListener() { Stop(); }

void UnixListener::Stop() {
  if (stopping_.exchange(true)) return;
  shutdown(fd_, SHUT_RDWR);  // wakes the accept
  if (thread_.joinable()) thread_.join();
  close(fd_);
  struct stat st;
  if (lstat(path_.c_str(), &st) == 0 && st.st_ino == inode_) unlink(path_.c_str());
}

void UnixListener::AcceptLoop() {
  NameThisThread("sy-unix-accept");
  const uid_t self = geteuid();
  absl::Time last_refusal_logged = absl::InfinitePast();
  while (true) {
    const absl::StatusOr<int> accepted =
        AcceptNext(fd_, SOCK_NONBLOCK | SOCK_CLOEXEC, path_, [this] { return stopping_.load(); });
    if (!accepted.ok()) {
      if (!absl::IsCancelled(accepted.status())) {
        SY_LOG(Error) << accepted.status().message() << "; no more connections";
      }
      return;
    }
    const int fd = *accepted;
    ucred credentials{};
    socklen_t size = sizeof(credentials);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &size) != 0 ||
        (credentials.uid != self && credentials.uid != 0)) {
      refused_.fetch_add(1);
      if (absl::Now() - last_refusal_logged > absl::Seconds(10)) {
        last_refusal_logged = absl::Now();
        SY_LOG(Warning) << "refused a connection on " << path_ << " from uid " << credentials.uid
                        << " (pid " << credentials.pid << "): only uid " << self << " may connect ("
                        << refused_.load() << " refused so far)";
      }
      close(fd);
      continue;
    }
    take_(fd, PeerCredentials{credentials.pid, credentials.uid, credentials.gid});
  }
}

std::optional<PeerCredentials> UnixPeer(absl::string_view grpc_peer) {
  int fd = 0;
  if (!absl::ConsumePrefix(&grpc_peer, "fd:") || !absl::SimpleAtoi(grpc_peer, &fd)) {
    return std::nullopt;
  }
  Peers& peers = AcceptedPeers();
  absl::MutexLock lock(&peers.mutex);
  auto it = peers.by_fd.find(fd);
  if (it == peers.by_fd.end()) return std::nullopt;
  return it->second;
}

}  // namespace switchyard
