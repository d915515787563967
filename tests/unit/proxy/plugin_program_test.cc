#include "proxy/plugin_program.h"

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace switchyard::proxy {
namespace {

std::string B64(const std::string& text) { return absl::Base64Escape(text); }

std::string Sharding8x4OverTwo() {
  switchyard::xla::OpSharding op;
  op.set_type(switchyard::xla::OpSharding::OTHER);
  op.add_tile_assignment_dimensions(2);
  op.add_tile_assignment_dimensions(1);
  op.add_tile_assignment_devices(0);
  op.add_tile_assignment_devices(1);
  return B64(op.SerializeAsString());
}

std::string Program(const std::string& json) {
  return absl::StrCat("__serialized_plugin_program ", json);
}

// As pathwaysutils 0.1.13 writes them.
TEST(PluginProgramTest, ParsesABulkWrite) {
  auto parsed = ParsePluginProgram(Program(absl::StrCat(
      R"({"bulk_persistence_write_request": {"write_requests": [{"b64_location": ")",
      B64("/ckpt/0"), R"(", "b64_name": ")", B64("params.w"), R"(", "b64_hlo_sharding_string": ")",
      Sharding8x4OverTwo(),
      R"(", "shape": [8, 4], "devices": {"device_ids": [4, 5]}, "timeout": {"seconds": 30, "nanos": 500}}]}})")));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto* write = std::get_if<PersistenceWrite>(&*parsed);
  ASSERT_NE(write, nullptr);
  ASSERT_EQ(write->arrays.size(), 1u);
  EXPECT_EQ(write->arrays[0].location, "/ckpt/0");
  EXPECT_EQ(write->arrays[0].name, "params.w");
  EXPECT_EQ(write->arrays[0].shape, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(write->arrays[0].devices, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(write->arrays[0].timeout, absl::Seconds(30) + absl::Nanoseconds(500));
  EXPECT_EQ(write->arrays[0].sharding.tile_assignment_dimensions_size(), 2);
}

TEST(PluginProgramTest, ParsesASingleRead) {
  auto parsed = ParsePluginProgram(Program(absl::StrCat(
      R"({"persistenceReadRequest": {"b64_location": ")", B64("/ckpt/0"),
      R"(", "shape": {"xla_primitive_type_str": "BF16", "dimensions": [8, 4]}, "b64_name": ")",
      B64("opt.mu"), R"(", "b64_hlo_sharding_string": ")", Sharding8x4OverTwo(),
      R"(", "devices": {"device_ids": [0, 1]}, "timeout": {"seconds": 3600, "nanos": 0}}})")));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto* read = std::get_if<PersistenceRead>(&*parsed);
  ASSERT_NE(read, nullptr);
  EXPECT_EQ(read->arrays[0].dtype, BF16);
  EXPECT_EQ(read->arrays[0].shape, (std::vector<int64_t>{8, 4}));
}

TEST(PluginProgramTest, ParsesProfileAndReshard) {
  auto profile = ParsePluginProgram(Program(
      R"({"profileRequest": {"traceLocation": "gs://b/d", "maxNumHosts": 1, )"
      R"("includeResourceManagers": true, "xprofTraceOptions": {"traceDirectory": "gs://b/d", )"
      R"("pwTraceOptions": {"enablePythonTracer": true}, "traceSessionName": "s1"}}})"));
  ASSERT_TRUE(profile.ok()) << profile.status();
  auto* request = std::get_if<ProfileRequest>(&*profile);
  ASSERT_NE(request, nullptr);
  EXPECT_EQ(request->location, "gs://b/d");
  EXPECT_TRUE(request->wants_output);
  EXPECT_EQ(request->session_name, "s1");

  auto reshard = ParsePluginProgram(Program(absl::StrCat(
      R"({"reshardRequest": {"donateInput": true, "inSharding": [{"devices": {"device_ids": [0, 1]}, )"
      R"("xla_hlo_sharding": ")",
      Sharding8x4OverTwo(),
      R"(", "memory_kind": "device"}], )"
      R"("outSharding": [{"devices": {"device_ids": [2, 3]}, "xla_hlo_sharding": ")",
      Sharding8x4OverTwo(), R"("}]}})")));
  ASSERT_TRUE(reshard.ok()) << reshard.status();
  auto* r = std::get_if<ReshardRequest>(&*reshard);
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(r->donate);
  EXPECT_EQ(r->outputs[0].devices, (std::vector<int64_t>{2, 3}));
}

TEST(PluginProgramTest, BadProgramsSayBadPluginProgram) {
  for (const std::string& bad : {
           std::string("{}"),
           Program("not json"),
           Program("{}"),
           Program(R"({"somethingElse": {}})"),
           Program(R"({"persistenceReadRequest": {"b64_location": "!!", "b64_name": "eA=="}})"),
           Program(absl::StrCat(R"({"persistenceWriteRequest": {"b64_location": ")", B64("/d"),
                                R"(", "b64_name": ")", B64("../etc"),
                                R"(", "b64_hlo_sharding_string": ")", Sharding8x4OverTwo(),
                                R"(", "shape": [8, 4], "devices": {"device_ids": [0, 1]}}})")),
           Program(
               absl::StrCat(R"({"persistenceReadRequest": {"b64_location": ")", B64("/d"),
                            R"(", "b64_name": ")", B64("x"),
                            R"(", "shape": {"xla_primitive_type_str": "F99", "dimensions": [1]},)"
                            R"( "b64_hlo_sharding_string": ")",
                            Sharding8x4OverTwo(), R"(", "devices": {"device_ids": [0]}}})")),
       }) {
    auto parsed = ParsePluginProgram(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status())) << parsed.status();
    EXPECT_TRUE(absl::StartsWith(parsed.status().message(), "Bad PluginProgram"))
        << parsed.status();
  }
}

}  // namespace
}  // namespace switchyard::proxy
