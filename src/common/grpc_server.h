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

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/server.h"

namespace grpc {
class Service;
}

namespace switchyard {

inline constexpr char kInProcessHost[] = "inproc";

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
  int port = 0;         // 0 in process
  std::string address;  // host:port, or inproc:<n>
};

// UNAVAILABLE if the address cannot be bound.
absl::StatusOr<StartedServer> StartGrpcServer(const std::string& host, int port,
                                              const std::vector<grpc::Service*>& services);

// A channel to another Switchyard process (or to an in-process server), with our
// channel arguments. An in-process address whose server is gone gives a channel whose
// calls fail with UNAVAILABLE, as a dead process's would.
std::shared_ptr<grpc::Channel> CreateChannel(const std::string& address);

}  // namespace switchyard
