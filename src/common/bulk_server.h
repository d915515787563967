#pragma once

// The serving end of the bulk data plane: buffers offered over gRPC (a one-time ticket,
// `Offer`) are read here over raw stream sockets, each connection one range, written
// from the buffer's host memory (or a reused staging chunk) straight to the socket.
//
// Who gets in: on a Unix socket only this user and root (UnixListener's credentials
// check), on TCP anyone who holds a ticket; a ticket is 128 random bits handed out only
// over the fleet's authenticated control plane, is good for one buffer's bytes once,
// and expires (limits::kBulkTicketS). There is no encryption: a fleet with TLS serves
// bulk bytes only on a Unix socket (the caller decides; see worker.cc).
//
// Threads: one accepting (`sy-bulk-accept`, or UnixListener's), one per connection
// (`sy-bulk-serve`, at most limits::kBulkConnectionsMax), one expiring offers
// (`sy-bulk-expire`). No lock is held while a socket is written.

#include <atomic>
#include <list>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/bulk_tickets.h"
#include "common/host_bytes.h"
#include "common/limits.h"
#include "common/unix_listener.h"

namespace switchyard::bulk {

class Server {
 public:
  // "unix:<path>" (a socket only this user and root may use; see UnixListener), or a
  // TCP host to listen on at `port` (0: a free one), offered as `advertise_host` (or the
  // host). UNAVAILABLE when it cannot listen there.
  static absl::StatusOr<std::unique_ptr<Server>> Start(const std::string& listen,
                                                       const std::string& advertise_host = "",
                                                       int port = 0);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Stops taking connections, breaks the open ones and waits for their threads.
  void Stop();

  // Where pullers connect: "unix:<path>" or "host:port".
  const std::string& address() const { return address_; }

  // RESOURCE_EXHAUSTED when too many offers are open, UNAVAILABLE once the listener
  // failed for good (the caller sends the bytes another way).
  absl::StatusOr<Ticket> Offer(std::shared_ptr<const Source> source);
  // Ends an offer before it is used up or expires (see Tickets::Withdraw).
  void Withdraw(const Ticket& ticket);

  struct Stats {
    int64_t bytes_served = 0;
    int64_t connections = 0;
    int64_t failed = 0;  // refused (a bad request or ticket, too many) or broken
  };
  Stats stats() const;

 private:
  Server() = default;
  void AcceptTcp();
  struct Connection {
    int fd;
    std::thread thread;
    bool done = false;  // its fd closed; the thread is ending
  };
  void Take(int fd);  // starts the connection's thread, or refuses it
  void Serve(Connection* connection);
  absl::Status Send(int fd, const Source& source, const Request& request);
  std::unique_ptr<HostBytes> Staging();
  void Return(std::unique_ptr<HostBytes> staging);
  void ExpireLoop();

  std::string address_;
  int tcp_fd_ = -1;
  std::unique_ptr<UnixListener> unix_listener_;
  std::thread accept_thread_;
  std::thread expire_thread_;
  absl::Notification stopping_;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> accepting_{true};  // false once accept failed for good

  mutable absl::Mutex mutex_;
  Tickets tickets_ ABSL_GUARDED_BY(mutex_){absl::Seconds(limits::kBulkTicketS),
                                           limits::kBulkOffersMax};
  // Connections being served (and ended ones not yet joined). A connection's fd is
  // closed under the lock, so Stop never shuts down a number the kernel gave away again.
  std::list<Connection> connections_ ABSL_GUARDED_BY(mutex_);
  int64_t serving_ ABSL_GUARDED_BY(mutex_) = 0;
  std::vector<std::unique_ptr<HostBytes>> staging_ ABSL_GUARDED_BY(mutex_);
  Stats stats_ ABSL_GUARDED_BY(mutex_);
};

// Where a process's data plane goes, by one rule for every role: a Unix socket beside the
// process's own (`unix_socket` set), else TCP on `listen_host` at `port` (0: a free one)
// offered as `advertise_host` (default: listen_host), but not where the fleet has TLS
// (the plane has no encryption yet). `carried`: what goes over gRPC without it, for the
// log. Null where there is none (said in the log); an error only for a chosen `port`
// that cannot be had.
struct PlaneOptions {
  std::string unix_socket;
  std::string listen_host;
  std::string advertise_host;
  int port = 0;
  bool fleet_tls = false;
  std::string carried;  // e.g. "buffers between workers"
};
absl::StatusOr<std::unique_ptr<Server>> StartPlane(const PlaneOptions& options);

}  // namespace switchyard::bulk
