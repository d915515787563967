#pragma once

// gRPC adapter for switchyard.ProxyAccess (proto/switchyard/proxy.proto): what a
// Switchyard client asks the proxy before its JAX client connects.

#include "proxy/ifrt_service.h"
#include "switchyard/proxy.grpc.pb.h"

namespace switchyard::proxy {

class AccessService final : public ::switchyard::ProxyAccess::Service {
 public:
  // `sessions` admits sessions; it outlives this service.
  explicit AccessService(IfrtService* sessions) : sessions_(sessions) {}

  grpc::Status CheckToken(grpc::ServerContext* context, const CheckTokenRequest* request,
                          CheckTokenResponse* response) override;

 private:
  IfrtService* const sessions_;
};

}  // namespace switchyard::proxy
