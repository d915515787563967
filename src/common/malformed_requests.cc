#include "common/malformed_requests.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace switchyard {
namespace {

namespace gx = grpc::experimental;

class MalformedRequestInterceptor final : public gx::Interceptor {
 public:
  explicit MalformedRequestInterceptor(std::string method) : method_(std::move(method)) {}

  void Intercept(gx::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(gx::InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() == nullptr) {
      // The one request of the call did not parse (or never came): the handler does
      // not run, and the status gRPC sends next is the one to correct.
      malformed_ = true;
    }
    if (malformed_ &&
        methods->QueryInterceptionHookPoint(gx::InterceptionHookPoints::PRE_SEND_STATUS)) {
      methods->ModifySendStatus(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("the request to ", method_,
                       " is not a message of its request type (truncated or malformed protobuf)")));
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  bool malformed_ = false;
};

class MalformedRequestFactory final : public gx::ServerInterceptorFactoryInterface {
 public:
  gx::Interceptor* CreateServerInterceptor(gx::ServerRpcInfo* info) override {
    const gx::ServerRpcInfo::Type type = info->type();
    if (type != gx::ServerRpcInfo::Type::UNARY &&
        type != gx::ServerRpcInfo::Type::SERVER_STREAMING) {
      return nullptr;  // nothing to do on any message of a stream
    }
    return new MalformedRequestInterceptor(info->method() == nullptr ? "" : info->method());
  }
};

}  // namespace

std::unique_ptr<gx::ServerInterceptorFactoryInterface> MalformedRequestInterceptors() {
  return std::make_unique<MalformedRequestFactory>();
}

}  // namespace switchyard
