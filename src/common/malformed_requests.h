#pragma once

// A server interceptor that answers a request which does not parse with
// INVALID_ARGUMENT naming the method, where gRPC's sync server answers INTERNAL with
// an empty message (for a bad input, not a fault of the server). Only for methods that
// take one request (unary and server-streaming): on a stream of requests, a message
// that does not parse looks like the stream's end, so a streaming handler that must
// tell them apart takes bytes and parses them itself (the proxy's session stream).

#include <memory>

#include "grpcpp/support/server_interceptor.h"

namespace switchyard {

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MalformedRequestInterceptors();

}  // namespace switchyard
