#pragma once

// Starts a gRPC server the way every Switchyard process wants it: lifted message
// limits, no SO_REUSEPORT (two processes must never share a port: the RM takes a
// re-registration from the same address as proof that the old process is gone),
// and the bound port reported back (listen on port 0 in tests).
//
// In-process transport: a server started on host `kInProcessHost` listens on no port;
// it is reached by its address, "inproc:<n>", through `CreateChannel` from the same
// process, over gRPC's in-process transport. Unit tests run a whole fleet (RM, workers,
// proxy sessions) that way, with every component real and no socket opened.

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/unix_listener.h"
#include "grpcpp/server.h"

namespace grpc {
class Service;
}

namespace switchyard {

inline constexpr char kInProcessHost[] = "inproc";

// Who talks to a server. The fleet (rm, proxies, workers, operators' `switchyard status`)
// speaks mutual TLS once `UseFleetTls` is called; JAX clients reach the proxy's own port
// in plain gRPC (what jaxlib's client speaks) and prove who they are with tokens.
enum class Audience { kFleet, kClients };

// The name every fleet certificate must carry (a DNS subject alternative name): channels
// check the server's certificate for it, whatever address they dial, since workers are
// dialled by the address they registered.
inline constexpr char kFleetServerName[] = "switchyard";

// Mutual TLS for the fleet: PEM files of the fleet's CA, this process's certificate
// (chain) and its key. From then on fleet servers require a client certificate the CA
// signed, and fleet channels present this one and accept only servers the CA signed.
// Call before any fleet server or channel exists; process-wide. INVALID_ARGUMENT naming
// the file that is missing, empty or not PEM.
absl::Status UseFleetTls(const std::string& ca_file, const std::string& cert_file,
                         const std::string& key_file);
bool FleetTlsEnabled();

// Unregisters an in-process server's address when the server goes away.
class InProcessName {
 public:
  InProcessName() = default;
  explicit InProcessName(std::string address) : address_(std::move(address)) {}
  InProcessName(InProcessName&& other) noexcept : address_(std::move(other.address_)) {
    other.address_.clear();
  }
  InProcessName& operator=(InProcessName&& other) noexcept;
  ~InProcessName();

 private:
  std::string address_;
};

struct StartedServer {
  // Declared before `server`, so that the name goes after the server has stopped.
  InProcessName name;
  std::unique_ptr<grpc::Server> server;
  // Declared after `server`, so that it stops before the server goes.
  std::unique_ptr<UnixListener> unix_listener;
  int port = 0;         // 0 in process and on a Unix socket
  std::string address;  // host:port, unix:<path>, or inproc:<n>

  // Stops taking connections, then shuts the server down (calls running at `deadline`
  // are cancelled). The caller then `server->Wait()`s.
  void Shutdown(std::chrono::system_clock::time_point deadline);
};

// Who is calling, as far as one client process can be told from another by its calls'
// peer names, which differ between its connections: on a Unix socket the client's
// process ("unix pid 4242", from `UnixPeer`); over TCP its host ("ipv4:10.0.0.5:4242" ->
// "ipv4:10.0.0.5", "ipv6:[::1]:4242" -> "ipv6:[::1]"), where its connections' ports differ.
std::string PeerIdentity(absl::string_view peer);

// The `host` for StartGrpcServer: `unix_socket`'s path when one is given, else `listen_host`.
std::string ServeHost(const std::string& listen_host, const std::string& unix_socket);

// `host` "unix:/path" listens on that Unix socket (see UnixListener: only this user and
// root get in), and `port` is not used. UNAVAILABLE if the address cannot be bound;
// FAILED_PRECONDITION for a socket directory other users may write.
absl::StatusOr<StartedServer> StartGrpcServer(const std::string& host, int port,
                                              const std::vector<grpc::Service*>& services,
                                              Audience audience = Audience::kFleet);

// A channel to another Switchyard process (or to an in-process server), with our
// channel arguments. Unix-socket addresses ("unix:/path") take no TLS: the socket's
// directory and the server's credentials check are what keep others out. An in-process address
// whose server is gone gives a channel whose calls fail with UNAVAILABLE, as a dead process's
// would.
std::shared_ptr<grpc::Channel> CreateChannel(const std::string& address,
                                             Audience audience = Audience::kFleet);

}  // namespace switchyard
