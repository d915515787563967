#pragma once

// The one place where absl::Status and grpc::Status are converted; codes share
// numbering, so the canonical code travels unchanged across every hop.

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace switchyard {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace switchyard
