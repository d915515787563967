#include "proxy/access_service.h"

#include <string>

#include "common/grpc_server.h"
#include "common/grpc_status.h"

namespace switchyard::proxy {

grpc::Status AccessService::CheckToken(grpc::ServerContext* context,
                                       const CheckTokenRequest* request,
                                       CheckTokenResponse* response) {
  absl::StatusOr<std::string> tenant =
      sessions_->Admit(PeerIdentity(context->peer()), request->token());
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  response->set_tenant(*std::move(tenant));
  return grpc::Status::OK;
}

}  // namespace switchyard::proxy
