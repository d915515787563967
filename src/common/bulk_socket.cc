#include "common/bulk_socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/copy_count.h"
#include "common/limits.h"
#include "common/unix_listener.h"

namespace switchyard::bulk {
namespace {

absl::Status Failed(absl::string_view what, int error) {
  if (error == EAGAIN || error == EWOULDBLOCK) {
    return absl::DeadlineExceededError(absl::StrCat(what, ": the peer stopped for too long"));
  }
  return absl::DataLossError(absl::StrCat(what, ": ", std::strerror(error)));
}

}  // namespace

absl::Status SetBlocking(int fd, absl::Duration idle) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("fcntl: ", std::strerror(errno)));
  }
  const timeval timeout = absl::ToTimeval(idle);
  if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout)) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout)) != 0) {
    return absl::InternalError(absl::StrCat("setsockopt: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, absl::Span<char> out) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = recv(fd, out.data() + done, out.size() - done, 0);
    if (n > 0) {
      done += n;
      CountCopied(n);  // the kernel's, out of the socket
    } else if (n == 0) {
      return absl::DataLossError(
          absl::StrCat("the peer hung up after ", done, " of ", out.size(), " bytes"));
    } else if (errno != EINTR) {
      return Failed(absl::StrCat("after ", done, " of ", out.size(), " bytes"), errno);
    }
  }
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, absl::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += n;
      CountCopied(n);  // the kernel's, into the socket
    } else if (n < 0 && errno != EINTR) {
      return Failed(absl::StrCat("sending, after ", done, " of ", bytes.size(), " bytes"), errno);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> Connect(const std::string& address, absl::Duration idle) {
  if (absl::StartsWith(address, kUnixScheme)) {
    const absl::string_view path = absl::StripPrefix(address, kUnixScheme);
    sockaddr_un target{};
    target.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof(target.sun_path)) {
      return absl::InvalidArgumentError(absl::StrCat("not a Unix socket path: '", path, "'"));
    }
    std::memcpy(target.sun_path, path.data(), path.size());
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
    if (connect(fd, reinterpret_cast<const sockaddr*>(&target), sizeof(target)) != 0) {
      const int error = errno;
      close(fd);
      return absl::UnavailableError(
          absl::StrCat("cannot connect to ", address, ": ", std::strerror(error)));
    }
    if (absl::Status set = SetBlocking(fd, idle); !set.ok()) {
      close(fd);
      return set;
    }
    return fd;
  }
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("not host:port: '", address, "'"));
  }
  const std::string host(
      absl::StripSuffix(absl::StripPrefix(absl::string_view(address).substr(0, colon), "["), "]"));
  const std::string port = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int error = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", address, ": ", gai_strerror(error)));
  }
  absl::Status last = absl::UnavailableError(absl::StrCat("no address for ", address));
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // Bound like every other wait: a host that drops the SYN is not waited on for minutes
    // (nor for a long `idle`, which is for a server slow to send, not to answer).
    timeval timeout = absl::ToTimeval(std::min(idle, absl::Seconds(limits::kBulkIdleS)));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      last = absl::UnavailableError(
          absl::StrCat("cannot connect to ", address, ": ", std::strerror(errno)));
      close(fd);
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (absl::Status set = SetBlocking(fd, idle); !set.ok()) {
      close(fd);
      last = set;
      continue;
    }
    freeaddrinfo(found);
    return fd;
  }
  freeaddrinfo(found);
  return last;
}

}  // namespace switchyard::bulk
