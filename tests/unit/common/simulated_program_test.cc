#include "common/simulated_program.h"

#include "gtest/gtest.h"

namespace switchyard {
namespace {

SimulatedProgram Example() {
  SimulatedProgram program;
  program.name = "jit_step (a name with spaces)";
  program.num_replicas = 1;
  program.num_partitions = 2;
  program.device_ordinals = {1, 0};
  program.outputs = {{11, {2, 3}}, {4, {}}};
  return program;
}

TEST(SimulatedProgramTest, RoundTrips) {
  const SimulatedProgram program = Example();
  absl::StatusOr<SimulatedProgram> decoded =
      DecodeSimulatedProgram(EncodeSimulatedProgram(program));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, program);
}

TEST(SimulatedProgramTest, RefusesWhatItWouldNotWrite) {
  for (const char* text :
       {"", "name x", "devices 0\nname x\nreplicas 1", "devices 0\nbogus 1\nname x",
        "devices -1\nname x", "devices 0\noutput 11\nname x", "devices 0\noutput 0 1\nname x",
        "devices 0\nreplicas 0\nname x", "devices 0\nreplicas 99999999999999999999\nname x",
        "devices 0\noutput 11 1,x\nname x"}) {
    EXPECT_EQ(DecodeSimulatedProgram(text).status().code(), absl::StatusCode::kInvalidArgument)
        << text;
  }
}

TEST(SimulatedProgramTest, RefusesOutputsPastTheElementBound) {
  EXPECT_EQ(
      DecodeSimulatedProgram("devices 0\noutput 11 4294967296,4294967296\nname x").status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(SimulatedProgramTest, BoundsRank) {
  std::string dims = "1";
  for (int i = 0; i < 64; ++i) dims += ",1";
  EXPECT_EQ(DecodeSimulatedProgram("devices 0\noutput 11 " + dims + "\nname x").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace switchyard
