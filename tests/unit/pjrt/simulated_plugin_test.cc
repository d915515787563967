// The built-in plugin of simulated hosts, through the same wrappers the worker uses.

#include <chrono>

#include "absl/time/clock.h"
#include "common/simulated_program.h"
#include "gtest/gtest.h"
#include "pjrt/pjrt.h"

namespace switchyard::pjrt {
namespace {

std::unique_ptr<Client> NewClient(int64_t devices, int64_t launch_micros) {
  absl::StatusOr<Plugin*> plugin = Plugin::LoadSimulated();
  EXPECT_TRUE(plugin.ok()) << plugin.status();
  absl::StatusOr<std::unique_ptr<Client>> client =
      (*plugin)->CreateClient({{"cpu_device_count", devices}, {"launch_micros", launch_micros}});
  EXPECT_TRUE(client.ok()) << client.status();
  return *std::move(client);
}

std::string Program(std::vector<int> ordinals) {
  SimulatedProgram program;
  program.name = "jit_f";
  program.device_ordinals = std::move(ordinals);
  program.outputs = {{static_cast<int>(DType::kF32), {2, 2}}, {static_cast<int>(DType::kS32), {}}};
  return EncodeSimulatedProgram(program);
}

TEST(SimulatedPluginTest, SaysWhatItIs) {
  absl::StatusOr<Plugin*> plugin = Plugin::LoadSimulated();
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  EXPECT_EQ((*plugin)->info().path, kSimulatedPluginPath);
  ASSERT_EQ((*plugin)->info().attributes.size(), 1u);
  EXPECT_EQ((*plugin)->info().attributes[0].first, "switchyard_simulated");
  std::unique_ptr<Client> client = NewClient(3, 0);
  EXPECT_EQ(client->platform_name(), "cpu");
  ASSERT_EQ(client->devices().size(), 3u);
  EXPECT_EQ(client->devices()[2].id, 2);
  EXPECT_EQ(client->devices()[2].default_memory_kind, "device");
  EXPECT_EQ(client->devices()[2].memories.size(), 3u);
}

TEST(SimulatedPluginTest, KeepsTheBytesItIsGiven) {
  std::unique_ptr<Client> client = NewClient(2, 0);
  const float data[4] = {1, 2, 3, 4};
  absl::StatusOr<std::unique_ptr<Buffer>> buffer = client->BufferFromHost(
      {reinterpret_cast<const char*>(data), sizeof(data)}, DType::kF32, {2, 2}, 1);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ((*buffer)->device_ordinal(), 1);
  EXPECT_TRUE((*buffer)->can_copy_ranges());
  absl::StatusOr<std::unique_ptr<HostBytes>> back = (*buffer)->ToHost();
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(std::memcmp((*back)->data(), data, sizeof(data)), 0);
  float tail[2] = {};
  ASSERT_TRUE((*buffer)->CopyRangeToHost(8, {reinterpret_cast<char*>(tail), 8}).ok());
  EXPECT_EQ(tail[1], 4);
}

TEST(SimulatedPluginTest, LaunchesTakeTheirTimeOneAfterAnother) {
  std::unique_ptr<Client> client = NewClient(1, 20'000);
  absl::StatusOr<std::unique_ptr<Executable>> executable =
      client->Compile(Program({0}), kSimulatedProgramFormat, "");
  ASSERT_TRUE(executable.ok()) << executable.status();
  EXPECT_EQ((*executable)->name(), "jit_f");
  ASSERT_EQ((*executable)->outputs().size(), 2u);
  EXPECT_EQ((*executable)->outputs()[0].dims, (std::vector<int64_t>{2, 2}));
  const absl::Time start = absl::Now();
  absl::StatusOr<Launch> first = (*executable)->Execute({{}});
  ASSERT_TRUE(first.ok()) << first.status();
  // The second waits for the device to be done with the first, then takes its own time.
  absl::StatusOr<Launch> second = (*executable)->Execute({{}});
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(second->outputs[0][0]->AwaitReady().ok());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(40));
  EXPECT_TRUE(first->outputs[0][1]->AwaitReady().ok());
  absl::StatusOr<std::unique_ptr<HostBytes>> zeros = first->outputs[0][0]->ToHost();
  ASSERT_TRUE(zeros.ok()) << zeros.status();
  ASSERT_EQ((*zeros)->size(), 16u);
  for (size_t i = 0; i < (*zeros)->size(); ++i) EXPECT_EQ((*zeros)->data()[i], 0);
}

TEST(SimulatedPluginTest, OutputsAreZerosHeldAsNone) {
  std::unique_ptr<Client> client = NewClient(1, 0);
  SimulatedProgram program;
  program.name = "huge";
  program.device_ordinals = {0};
  program.outputs = {{static_cast<int>(DType::kF32), {1 << 16, 1 << 18}}};  // 64 GiB
  absl::StatusOr<std::unique_ptr<Executable>> executable =
      client->Compile(EncodeSimulatedProgram(program), kSimulatedProgramFormat, "");
  ASSERT_TRUE(executable.ok()) << executable.status();
  absl::StatusOr<Launch> launch = (*executable)->Execute({{}});
  ASSERT_TRUE(launch.ok()) << launch.status();
  const Buffer& out = *launch->outputs[0][0];
  EXPECT_EQ(out.host_size_bytes(), int64_t{1} << 36);
  char tail[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  ASSERT_TRUE(out.CopyRangeToHost((int64_t{1} << 36) - 8, {tail, 8}).ok());
  for (char c : tail) EXPECT_EQ(c, 0);
  EXPECT_EQ(out.CopyRangeToHost(int64_t{1} << 36, {tail, 8}).code(), absl::StatusCode::kOutOfRange);
}

TEST(SimulatedPluginTest, CompilesOnlyMetadata) {
  std::unique_ptr<Client> client = NewClient(1, 0);
  absl::StatusOr<std::unique_ptr<Executable>> real = client->Compile("module {}", "mlir", "");
  EXPECT_EQ(real.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(real.status().message().find("simulated host"), std::string::npos);
  EXPECT_EQ(client->Compile(Program({1}), kSimulatedProgramFormat, "").status().code(),
            absl::StatusCode::kInvalidArgument);  // no device 1
  EXPECT_EQ(client->Compile("name x", kSimulatedProgramFormat, "").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SimulatedPluginTest, RefusesBadClientOptions) {
  absl::StatusOr<Plugin*> plugin = Plugin::LoadSimulated();
  ASSERT_TRUE(plugin.ok());
  EXPECT_EQ((*plugin)->CreateClient({{"cpu_device_count", int64_t{0}}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*plugin)->CreateClient({{"launch_micros", int64_t{-1}}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace switchyard::pjrt
