#include "common/bulk_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/accept.h"
#include "common/bulk_socket.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/thread_name.h"

namespace switchyard::bulk {
namespace {

std::string Errno(absl::string_view what) { return absl::StrCat(what, ": ", std::strerror(errno)); }

// A listening TCP socket on `host` at `*port` (0: a free one, then set).
absl::StatusOr<int> ListenTcp(const std::string& host, int* port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string bare = std::string(absl::StripSuffix(absl::StripPrefix(host, "["), "]"));
  if (const int error = getaddrinfo(bare.empty() ? nullptr : bare.c_str(),
                                    absl::StrCat(*port).c_str(), &hints, &found);
      error != 0) {
    return absl::UnavailableError(
        absl::StrCat("bulk transfers cannot listen on '", host, "': ", gai_strerror(error)));
  }
  absl::Status last = absl::UnavailableError(absl::StrCat("no address for '", host, "'"));
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last = absl::UnavailableError(Errno("socket"));
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_storage bound{};
    socklen_t length = sizeof(bound);
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
      last = absl::UnavailableError(
          Errno(absl::StrCat("bulk transfers on '", host, "' port ", *port)));
      close(fd);
      continue;
    }
    *port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    freeaddrinfo(found);
    return fd;
  }
  freeaddrinfo(found);
  return last;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const std::string& listen,
                                                      const std::string& advertise_host, int port) {
  std::unique_ptr<Server> server(new Server);
  if (absl::StartsWith(listen, kUnixScheme)) {
    const std::string path(absl::StripPrefix(listen, kUnixScheme));
    absl::StatusOr<std::unique_ptr<UnixListener>> listener = UnixListener::Start(
        path, [raw = server.get()](int fd, const PeerCredentials&) { raw->Take(fd); });
    if (!listener.ok()) return listener.status();
    server->unix_listener_ = *std::move(listener);
    server->address_ = listen;
  } else {
    if (port < 0 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("no TCP port ", port));
    }
    absl::StatusOr<int> fd = ListenTcp(listen, &port);
    if (!fd.ok()) return fd.status();
    server->tcp_fd_ = *fd;
    const std::string& host = advertise_host.empty() ? listen : advertise_host;
    server->address_ = absl::StrCat(absl::StrContains(host, ':') && !absl::StartsWith(host, "[")
                                        ? absl::StrCat("[", host, "]")
                                        : host,
                                    ":", port);
    server->accept_thread_ = std::thread([raw = server.get()] { raw->AcceptTcp(); });
  }
  server->expire_thread_ = std::thread([raw = server.get()] { raw->ExpireLoop(); });
  return server;
}

Server::~Server() { Stop(); }

void Server::Stop() {
  if (stopped_.exchange(true)) return;
  stopping_.Notify();
  if (unix_listener_ != nullptr) unix_listener_->Stop();
  if (tcp_fd_ >= 0) shutdown(tcp_fd_, SHUT_RDWR);  // wakes the accept
  if (accept_thread_.joinable()) accept_thread_.join();
  if (tcp_fd_ >= 0) close(tcp_fd_);
  if (expire_thread_.joinable()) expire_thread_.join();
  std::list<Connection> connections;
  {
    absl::MutexLock lock(&mutex_);
    for (Connection& connection : connections_) {
      if (!connection.done) shutdown(connection.fd, SHUT_RDWR);  // ends its reads and writes
    }
    connections.splice(connections.end(), connections_);
  }
  for (Connection& connection : connections) connection.thread.join();
}

absl::StatusOr<Ticket> Server::Offer(std::shared_ptr<const Source> source) {
  if (!accepting_) return absl::UnavailableError("this data plane stopped accepting");
  absl::MutexLock lock(&mutex_);
  return tickets_.Offer(std::move(source), absl::Now());
}

void Server::Withdraw(const Ticket& ticket) {
  absl::MutexLock lock(&mutex_);
  tickets_.Withdraw(ticket);
}

Server::Stats Server::stats() const {
  absl::MutexLock lock(&mutex_);
  return stats_;
}

void Server::ExpireLoop() {
  NameThisThread("sy-bulk-expire");
  while (!stopping_.WaitForNotificationWithTimeout(absl::Seconds(limits::kBulkTicketS) / 4)) {
    absl::MutexLock lock(&mutex_);
    tickets_.Expire(absl::Now());
  }
  absl::MutexLock lock(&mutex_);
  tickets_.Expire(absl::InfiniteFuture());  // gives the buffers back
}

void Server::AcceptTcp() {
  NameThisThread("sy-bulk-accept");
  while (true) {
    const absl::StatusOr<int> accepted =
        AcceptNext(tcp_fd_, SOCK_CLOEXEC, address_, [this] { return stopping_.HasBeenNotified(); });
    if (!accepted.ok()) {
      if (!absl::IsCancelled(accepted.status())) {
        SY_LOG(Error) << accepted.status().message() << "; bytes go over gRPC from now on";
        accepting_ = false;  // no offer names a door nobody opens
      }
      return;
    }
    Take(*accepted);
  }
}

void Server::Take(int fd) {
  {
    absl::MutexLock lock(&mutex_);
    ++stats_.connections;
    // Joins the ended (each set `done` as its last step under this lock).
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (!it->done) {
        ++it;
        continue;
      }
      it->thread.join();
      it = connections_.erase(it);
    }
    if (!stopping_.HasBeenNotified() && serving_ < limits::kBulkConnectionsMax) {
      ++serving_;
      Connection& connection = connections_.emplace_back();
      connection.fd = fd;
      connection.thread = std::thread([this, &connection] { Serve(&connection); });
      return;
    }
    ++stats_.failed;
  }
  // A fresh connection's buffer takes a short reply without blocking.
  const std::string reply = EncodeReply(absl::ResourceExhaustedError(absl::StrCat(
      "this server is serving ", limits::kBulkConnectionsMax, " bulk transfers already")));
  (void)!send(fd, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  close(fd);
}

void Server::Serve(Connection* connection) {
  NameThisThread("sy-bulk-serve");
  const int fd = connection->fd;
  absl::Status status = SetBlocking(fd, absl::Seconds(limits::kBulkIdleS));
  std::shared_ptr<const Source> source;
  Request request;
  if (status.ok()) {
    std::string bytes(kRequestBytes, '\0');
    status = ReadAll(fd, absl::MakeSpan(bytes.data(), bytes.size()));
    absl::StatusOr<Request> parsed =
        status.ok() ? ParseRequest(bytes) : absl::StatusOr<Request>(status);
    if (parsed.ok()) {
      request = *parsed;
      absl::MutexLock lock(&mutex_);
      absl::StatusOr<std::shared_ptr<const Source>> redeemed =
          tickets_.Redeem(request, absl::Now());
      if (redeemed.ok()) {
        source = *std::move(redeemed);
      } else {
        status = redeemed.status();
      }
    } else {
      status = parsed.status();
    }
  }
  if (source != nullptr) {
    status = WriteAll(fd, EncodeReply(absl::OkStatus()));
    if (status.ok()) status = Send(fd, *source, request);
  } else if (absl::IsInvalidArgument(status) || absl::IsPermissionDenied(status) ||
             absl::IsOutOfRange(status)) {
    (void)WriteAll(fd, EncodeReply(status));  // a request we could read: say why not
  }
  source.reset();  // the buffer goes before the thread does
  absl::MutexLock lock(&mutex_);
  if (request.length > 0 && status.ok()) stats_.bytes_served += request.length;
  if (!status.ok()) ++stats_.failed;
  close(fd);
  --serving_;
  connection->done = true;
}

absl::Status Server::Send(int fd, const Source& source, const Request& request) {
  const absl::Span<const char> whole = source.Contiguous();
  if (!whole.empty()) {
    // A chunk at a time, each once it is there (a source may still be filling).
    absl::Status status;
    for (uint64_t done = 0; done < request.length && status.ok();) {
      const uint64_t n = std::min<uint64_t>(limits::kBulkChunkBytes, request.length - done);
      const auto offset = static_cast<int64_t>(request.offset + done);
      status = source.Await(offset + static_cast<int64_t>(n));
      if (status.ok()) status = WriteAll(fd, absl::string_view(whole.data() + offset, n));
      if (status.ok()) source.Sent(offset, offset + static_cast<int64_t>(n));
      done += n;
    }
    return status;
  }
  std::unique_ptr<HostBytes> staging = Staging();
  absl::Status status;
  for (uint64_t done = 0; done < request.length && status.ok();) {
    const size_t n = std::min<uint64_t>(staging->size(), request.length - done);
    const auto offset = static_cast<int64_t>(request.offset + done);
    status = source.Read(offset, absl::MakeSpan(staging->data(), n));
    if (status.ok()) status = WriteAll(fd, absl::string_view(staging->data(), n));
    if (status.ok()) source.Sent(offset, offset + static_cast<int64_t>(n));
    done += n;
  }
  Return(std::move(staging));
  return status;
}

std::unique_ptr<HostBytes> Server::Staging() {
  {
    absl::MutexLock lock(&mutex_);
    if (!staging_.empty()) {
      std::unique_ptr<HostBytes> staging = std::move(staging_.back());
      staging_.pop_back();
      return staging;
    }
  }
  return std::make_unique<HostBytes>(limits::kBulkChunkBytes);
}

void Server::Return(std::unique_ptr<HostBytes> staging) {
  absl::MutexLock lock(&mutex_);
  if (static_cast<int64_t>(staging_.size()) < limits::kBulkStagingKept) {
    staging_.push_back(std::move(staging));
  }
}

absl::StatusOr<std::unique_ptr<Server>> StartPlane(const PlaneOptions& options) {
  std::string listen = options.listen_host;
  int port = options.port;
  if (!options.unix_socket.empty()) {
    listen = absl::StrCat(kUnixScheme, options.unix_socket, ".bulk");
    port = 0;
  } else if (options.fleet_tls) {
    SY_LOG(Info) << options.carried
                 << " go over gRPC: the fleet has TLS, and the bulk data plane has no "
                    "encryption yet";
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<Server>> plane =
      Server::Start(listen, options.advertise_host, port);
  if (!plane.ok()) {
    if (port != 0) {
      return absl::Status(plane.status().code(),
                          absl::StrCat("--bulk_port=", port, ": ", plane.status().message()));
    }
    SY_LOG(Warning) << "no bulk data plane (" << options.carried
                    << " go over gRPC): " << plane.status().message();
    return nullptr;
  }
  SY_LOG(Info) << "bulk transfers on " << (*plane)->address();
  return plane;
}

}  // namespace switchyard::bulk
