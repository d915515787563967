#include "pjrt/plugin.h"

#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

#include <fstream>

#include "google/protobuf/message_lite.h"
#include "gtest/gtest.h"
#include "pjrt/client.h"
#include "testing/status_matchers.h"
#include "unit/pjrt/test_plugin.h"

namespace switchyard::pjrt {
namespace {

TEST(PluginTest, MissingFileIsNotFound) {
  auto plugin = Plugin::Load("/nonexistent/libpjrt.so");
  EXPECT_EQ(plugin.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(plugin.status().message().find("does not exist"), std::string::npos);
}

TEST(PluginTest, FileThatIsNotALibraryIsInvalidArgument) {
  std::string path = ::testing::TempDir() + "/not_a_plugin.so";
  std::ofstream(path) << "this is text, not ELF";
  auto plugin = Plugin::Load(path);
  EXPECT_EQ(plugin.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plugin.status().message().find("not a loadable shared library"), std::string::npos);
}

TEST(PluginTest, LibraryWithoutGetPjrtApiIsInvalidArgument) {
  Dl_info info;
  // libprotobuf: a library, but no PJRT entry point. (Not libc: a sanitizer's runtime in
  // the test binary itself answers for fopen and the like.)
  ASSERT_NE(dladdr(reinterpret_cast<void*>(&google::protobuf::ShutdownProtobufLibrary), &info), 0);
  auto plugin = Plugin::Load(info.dli_fname);
  EXPECT_EQ(plugin.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plugin.status().message().find("GetPjrtApi"), std::string::npos);
}

TEST(PluginTest, RealPluginReportsVersionsAndAttributes) {
  ASSERT_FALSE(TestPluginPath().empty()) << "SWITCHYARD_TEST_PLUGIN not set";
  SY_ASSERT_OK_AND_ASSIGN(Plugin * plugin, Plugin::Load(TestPluginPath()));
  const PluginInfo& info = plugin->info();
  EXPECT_EQ(info.api_major, 0);
  EXPECT_GE(info.api_minor, 81);
  EXPECT_GT(info.xla_version, 0);
  EXPECT_FALSE(info.stablehlo_current_version.empty());
  EXPECT_FALSE(info.stablehlo_minimum_version.empty());
  // Loading again returns the same plugin: never loaded twice, never unloaded.
  SY_ASSERT_OK_AND_ASSIGN(Plugin * again, Plugin::Load(TestPluginPath()));
  EXPECT_EQ(plugin, again);
}

}  // namespace
}  // namespace switchyard::pjrt
