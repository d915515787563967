#include "pjrt/client.h"

#include <cstring>

#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "pjrt/buffer.h"
#include "pjrt/executable.h"
#include "testing/status_matchers.h"
#include "unit/pjrt/test_plugin.h"
#include "xla/compile_options.pb.h"

namespace switchyard::pjrt {
namespace {

constexpr char kAddProgram[] = R"(
module @add {
  func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<4xf32>, tensor<f32>) {
    %sum = stablehlo.add %a, %b : tensor<4xf32>
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %total = stablehlo.reduce(%sum init: %zero) applies stablehlo.add across dimensions = [0]
        : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
    return %sum, %total : tensor<4xf32>, tensor<f32>
  }
}
)";

constexpr char kDivideByZeroIsFine[] = R"(
module @broken {
  func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.undefined_op %a : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
)";

std::string SingleDeviceOptions() {
  switchyard::xla::CompileOptionsProto options;
  auto* build = options.mutable_executable_build_options();
  build->set_device_ordinal(-1);
  build->set_num_replicas(1);
  build->set_num_partitions(1);
  return options.SerializeAsString();
}

std::string Bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

absl::StatusOr<std::string> HostString(const Buffer& buffer) {
  SY_ASSIGN_OR_RETURN(std::unique_ptr<HostBytes> bytes, buffer.ToHost());
  return std::string(bytes->data(), bytes->size());
}

class ClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto plugin = Plugin::Load(TestPluginPath());
    ASSERT_TRUE(plugin.ok()) << plugin.status();
    auto client = (*plugin)->CreateClient({{"cpu_device_count", int64_t{3}}});
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(client).value().release();
  }
  static void TearDownTestSuite() {
    delete client_;
    client_ = nullptr;
  }
  static Client* client_;
};
Client* ClientTest::client_ = nullptr;

TEST_F(ClientTest, ListsTheRequestedDevicesWithMemories) {
  EXPECT_EQ(client_->platform_name(), "cpu");
  ASSERT_EQ(client_->devices().size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const DeviceDesc& device = client_->devices()[i];
    EXPECT_EQ(device.ordinal, i);
    EXPECT_EQ(device.id, i);
    EXPECT_FALSE(device.memories.empty());
    EXPECT_EQ(device.default_memory_kind, "device");
  }
}

TEST_F(ClientTest, BufferRoundTrip) {
  std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  SY_ASSERT_OK_AND_ASSIGN(auto buffer,
                          client_->BufferFromHost(Bytes(values), DType::kF32, {2, 3}, 2));
  EXPECT_EQ(buffer->dtype(), DType::kF32);
  EXPECT_EQ(buffer->dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(buffer->device_ordinal(), 2);
  EXPECT_EQ(buffer->host_size_bytes(), 24);
  SY_ASSERT_OK_AND_ASSIGN(std::string back, HostString(*buffer));
  EXPECT_EQ(Floats(back), values);
}

TEST_F(ClientTest, AColumnMajorBufferSaysSoAndComesToHostMajorToMinor) {
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};  // 2x3, as hosts hold it
  SY_ASSERT_OK_AND_ASSIGN(auto row, client_->BufferFromHost(Bytes(values), DType::kF32, {2, 3}, 0));
  EXPECT_EQ(row->minor_to_major(), (std::vector<int64_t>{1, 0}));
  EXPECT_TRUE(row->can_copy_ranges());
  SY_ASSERT_OK_AND_ASSIGN(
      auto column, client_->BufferFromHost(Bytes(values), DType::kF32, {2, 3}, 0, "", {0, 1}));
  EXPECT_EQ(column->minor_to_major(), (std::vector<int64_t>{0, 1}));
  // Its device bytes are not the host order: no piecewise copies of them.
  EXPECT_FALSE(column->can_copy_ranges());
  SY_ASSERT_OK_AND_ASSIGN(std::string host, HostString(*column));
  EXPECT_EQ(Floats(host), values);
  EXPECT_EQ(client_->BufferFromHost(Bytes(values), DType::kF32, {2, 3}, 0, "", {0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, BuffersInEachMemoryKind) {
  for (const std::string kind : {"device", "pinned_host", "unpinned_host"}) {
    SY_ASSERT_OK_AND_ASSIGN(auto buffer,
                            client_->BufferFromHost(Bytes({1, 2}), DType::kF32, {2}, 1, kind));
    EXPECT_EQ(buffer->memory_kind(), kind);
    SY_ASSERT_OK_AND_ASSIGN(std::string back, HostString(*buffer));
    EXPECT_EQ(Floats(back), (std::vector<float>{1, 2}));
  }
  EXPECT_EQ(client_->BufferFromHost(Bytes({1}), DType::kF32, {1}, 0, "tape").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, ZeroSizeAndScalarBuffers) {
  SY_ASSERT_OK_AND_ASSIGN(auto empty, client_->BufferFromHost({}, DType::kF32, {0, 5}, 0));
  SY_ASSERT_OK_AND_ASSIGN(std::string empty_bytes, HostString(*empty));
  EXPECT_TRUE(empty_bytes.empty());
  std::string one(1, '\1');
  SY_ASSERT_OK_AND_ASSIGN(auto scalar, client_->BufferFromHost(one, DType::kPred, {}, 0));
  SY_ASSERT_OK_AND_ASSIGN(std::string scalar_bytes, HostString(*scalar));
  EXPECT_EQ(scalar_bytes, one);
}

TEST_F(ClientTest, HandedOverBytesOutliveTheCallAndStayTheBuffers) {
  // Large enough for an allocation of its own, which the CPU plugin may alias.
  std::vector<float> values(1 << 20);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  const std::string expected(reinterpret_cast<const char*>(values.data()),
                             values.size() * sizeof(float));
  auto bytes = std::make_shared<HostBytes>(expected.size());
  std::memcpy(bytes->data(), expected.data(), expected.size());
  SY_ASSERT_OK_AND_ASSIGN(
      auto buffer,
      client_->BufferFromOwnedHost(bytes, DType::kF32, {static_cast<int64_t>(values.size())}, 0));
  bytes.reset();  // the buffer keeps what it uses
  SY_ASSERT_OK_AND_ASSIGN(std::string back, HostString(*buffer));
  EXPECT_TRUE(back == expected);
  EXPECT_EQ(client_->BufferFromOwnedHost(std::make_shared<HostBytes>(3), DType::kF32, {4}, 0)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, RangesOfTheHostCopyComePieceByPiece) {
  std::vector<float> values(300000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  const std::string bytes(reinterpret_cast<const char*>(values.data()),
                          values.size() * sizeof(float));
  SY_ASSERT_OK_AND_ASSIGN(
      auto buffer,
      client_->BufferFromHost(bytes, DType::kF32, {static_cast<int64_t>(values.size())}, 0));
  std::string pieces(bytes.size(), '\0');
  const int64_t cut1 = 4096 * 7 + 12, cut2 = 700001;
  ASSERT_TRUE(buffer->CopyRangeToHost(0, absl::MakeSpan(pieces.data(), cut1)).ok());
  ASSERT_TRUE(
      buffer->CopyRangeToHost(cut1, absl::MakeSpan(pieces.data() + cut1, cut2 - cut1)).ok());
  ASSERT_TRUE(
      buffer->CopyRangeToHost(cut2, absl::MakeSpan(pieces.data() + cut2, bytes.size() - cut2))
          .ok());
  EXPECT_TRUE(pieces == bytes);
  char one;
  EXPECT_EQ(buffer->CopyRangeToHost(bytes.size(), absl::MakeSpan(&one, 1)).code(),
            absl::StatusCode::kOutOfRange);
}

TEST_F(ClientTest, BadBufferArgumentsAreInvalidArgument) {
  EXPECT_EQ(client_->BufferFromHost("abc", DType::kF32, {4}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->BufferFromHost({}, DType::kF32, {0}, 7).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->BufferFromHost({}, DType::kInvalid, {0}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, CompileExecuteSerializeDeserialize) {
  SY_ASSERT_OK_AND_ASSIGN(auto executable,
                          client_->Compile(kAddProgram, "mlir", SingleDeviceOptions()));
  EXPECT_EQ(executable->device_ordinals(), std::vector<int>{0});
  ASSERT_EQ(executable->outputs().size(), 2u);
  EXPECT_EQ(executable->outputs()[0].dtype, DType::kF32);
  EXPECT_EQ(executable->outputs()[0].dims, std::vector<int64_t>{4});
  EXPECT_TRUE(executable->outputs()[1].dims.empty());

  SY_ASSERT_OK_AND_ASSIGN(auto a,
                          client_->BufferFromHost(Bytes({1, 2, 3, 4}), DType::kF32, {4}, 0));
  SY_ASSERT_OK_AND_ASSIGN(auto b,
                          client_->BufferFromHost(Bytes({10, 20, 30, 40}), DType::kF32, {4}, 0));
  auto run = [&](const Executable& exe) {
    auto launch = exe.Execute({{a.get(), b.get()}});
    ASSERT_TRUE(launch.ok()) << launch.status();
    SY_ASSERT_OK(launch->completions[0]->Await());
    SY_ASSERT_OK_AND_ASSIGN(std::string sum, HostString(*launch->outputs[0][0]));
    EXPECT_EQ(Floats(sum), (std::vector<float>{11, 22, 33, 44}));
    SY_ASSERT_OK_AND_ASSIGN(std::string total, HostString(*launch->outputs[0][1]));
    EXPECT_EQ(Floats(total), std::vector<float>{110});
  };
  run(*executable);

  SY_ASSERT_OK_AND_ASSIGN(std::string bytes, executable->Serialize());
  EXPECT_FALSE(bytes.empty());
  SY_ASSERT_OK_AND_ASSIGN(auto loaded, client_->Deserialize(bytes));
  EXPECT_EQ(loaded->outputs().size(), 2u);
  run(*loaded);
}

TEST_F(ClientTest, WrongArgumentCountIsInvalidArgument) {
  SY_ASSERT_OK_AND_ASSIGN(auto executable,
                          client_->Compile(kAddProgram, "mlir", SingleDeviceOptions()));
  EXPECT_EQ(executable->Execute({}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, MalformedProgramIsAnErrorNotACrash) {
  auto garbage = client_->Compile("\x01\x02 not mlir at all", "mlir", SingleDeviceOptions());
  EXPECT_FALSE(garbage.ok());
  auto unknown_op = client_->Compile(kDivideByZeroIsFine, "mlir", SingleDeviceOptions());
  EXPECT_FALSE(unknown_op.ok());
  EXPECT_FALSE(client_->Compile(kAddProgram, "no-such-format", SingleDeviceOptions()).ok());
  EXPECT_FALSE(client_->Deserialize("definitely not an executable").ok());
}

}  // namespace
}  // namespace switchyard::pjrt
