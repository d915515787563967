#pragma once

// Starts a gRPC server the way every Switchyard process wants it: lifted message
// limits, no SO_REUSEPORT (two processes must never share a port: the RM takes a
// re-registration from the same address as proof that the old process is gone),
// and the bound port reported back (listen on port 0 in tests).

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/server.h"

namespace grpc {
class Service;
}

namespace switchyard {

struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

// UNAVAILABLE if the address cannot be bound.
absl::StatusOr<StartedServer> StartGrpcServer(const std::string& host, int port,
                                              const std::vector<grpc::Service*>& services);

// Channel arguments for talking to another Switchyard process.
std::shared_ptr<grpc::Channel> CreateChannel(const std::string& address);

}  // namespace switchyard
