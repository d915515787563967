#include "common/grpc_status.h"

#include "gtest/gtest.h"

namespace switchyard {
namespace {

TEST(GrpcStatusTest, RoundTripKeepsCodeAndMessage) {
  for (auto code : {absl::StatusCode::kInvalidArgument, absl::StatusCode::kNotFound,
                    absl::StatusCode::kDataLoss, absl::StatusCode::kUnimplemented}) {
    absl::Status status(code, "what went wrong");
    grpc::Status grpc_status = ToGrpcStatus(status);
    EXPECT_EQ(static_cast<int>(grpc_status.error_code()), static_cast<int>(code));
    EXPECT_EQ(FromGrpcStatus(grpc_status), status);
  }
}

TEST(GrpcStatusTest, OkIsOk) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

}  // namespace
}  // namespace switchyard
