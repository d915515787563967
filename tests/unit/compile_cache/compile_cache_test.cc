#include "compile_cache/compile_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"
#include "xla/compile_options.pb.h"

namespace switchyard::compile_cache {
namespace {

namespace fs = std::filesystem;

std::string Options(std::vector<int64_t> devices, bool extra_override = false) {
  switchyard::xla::CompileOptionsProto options;
  auto* build = options.mutable_executable_build_options();
  build->set_num_replicas(1);
  build->set_num_partitions(static_cast<int64_t>(devices.size()));
  auto* assignment = build->mutable_device_assignment();
  assignment->set_replica_count(1);
  assignment->set_computation_count(static_cast<int32_t>(devices.size()));
  for (int64_t id : devices) assignment->add_computation_devices()->add_replica_device_ids(id);
  (*options.mutable_env_option_overrides())["a"].set_int_field(1);
  (*options.mutable_env_option_overrides())["b"].set_bool_field(true);
  if (extra_override) (*options.mutable_env_option_overrides())["c"].set_int_field(3);
  return options.SerializeAsString();
}

const PluginIdentity kPlugin{"aaaa", "cpu 0.115 (PJRT 0.115)"};
const PluginIdentity kOtherPlugin{"bbbb", "cpu 0.116 (PJRT 0.116)"};

class CompileCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            absl::StrCat("compile_cache_test_", getpid(), "_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  Key KeyFor(absl::string_view program, const PluginIdentity& plugin = kPlugin,
             std::vector<int64_t> devices = {0}) {
    absl::StatusOr<Key> key = MakeKey("mlir", program, Options(devices), plugin, "jit_f");
    EXPECT_TRUE(key.ok()) << key.status();
    return key.value_or(Key());
  }

  std::unique_ptr<CompileCache> Open(int64_t max_bytes = 0) {
    auto cache = CompileCache::Open(CacheDirectory(root_.string()), max_bytes);
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache.ok() ? *std::move(cache) : nullptr;
  }

  std::vector<fs::path> Files() {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(CacheDirectory(root_.string()))) {
      files.push_back(entry.path());
    }
    return files;
  }

  fs::path root_;
};

TEST_F(CompileCacheTest, AStoredExecutableComesBackWithItsCompileTime) {
  auto cache = Open();
  ASSERT_NE(cache, nullptr);
  const Key key = KeyFor("program");
  EXPECT_FALSE(cache->Lookup(key).has_value());
  cache->Store(key, "executable bytes", 1.5);
  std::optional<Hit> hit = cache->Lookup(key);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->executable, "executable bytes");
  EXPECT_EQ(hit->compile_seconds, 1.5);
  // Another process (a restarted worker) opens the same directory and hits too.
  auto again = Open();
  ASSERT_TRUE(again->Lookup(key).has_value());
  Counters counters = cache->counters();
  EXPECT_EQ(counters.hits, 1);
  EXPECT_EQ(counters.misses, 1);
  EXPECT_EQ(counters.stores, 1);
  EXPECT_GT(counters.bytes_written, 0);
  SY_ASSERT_OK_AND_ASSIGN(std::vector<EntryInfo> entries,
                          ListEntries(CacheDirectory(root_.string())));
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].program_name, "jit_f");
  EXPECT_EQ(entries[0].plugin_description, kPlugin.description);
  EXPECT_EQ(entries[0].compile_seconds, 1.5);
}

TEST_F(CompileCacheTest, KeysFollowWhatChangesTheExecutableOnly) {
  const Key key = KeyFor("program");
  EXPECT_EQ(KeyFor("program").id, key.id);  // map order does not matter
  EXPECT_NE(KeyFor("program2").id, key.id);
  const Key other_devices = KeyFor("program", kPlugin, {1});
  EXPECT_NE(other_devices.id, key.id);
  EXPECT_EQ(other_devices.options_digest, key.options_digest);
  EXPECT_NE(other_devices.devices_digest, key.devices_digest);
  const Key other_plugin = KeyFor("program", kOtherPlugin);
  EXPECT_NE(other_plugin.id, key.id);
  EXPECT_EQ(other_plugin.program_digest, key.program_digest);
  SY_ASSERT_OK_AND_ASSIGN(Key more_options,
                          MakeKey("mlir", "program", Options({0}, true), kPlugin, "jit_f"));
  EXPECT_NE(more_options.options_digest, key.options_digest);
  SY_ASSERT_OK_AND_ASSIGN(Key hlo, MakeKey("hlo", "program", Options({0}), kPlugin, "jit_f"));
  EXPECT_NE(hlo.program_digest, key.program_digest);
  EXPECT_EQ(MakeKey("mlir", "p", "\xff\xff not options", kPlugin, "f").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CompileCacheTest, APluginChangeMissesAndSaysWhy) {
  auto cache = Open();
  cache->Store(KeyFor("program"), "executable", 1.0);
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cache->Lookup(KeyFor("program", kOtherPlugin)).has_value());
  EXPECT_FALSE(cache->Lookup(KeyFor("program", kPlugin, {3})).has_value());
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("differ in the plugin (cached for cpu 0.115 (PJRT 0.115); this worker has "
                     "cpu 0.116 (PJRT 0.116))"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("the device assignment"), std::string::npos) << log;
  // A program never seen before is a plain miss, without a story.
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cache->Lookup(KeyFor("new program")).has_value());
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST_F(CompileCacheTest, ACorruptOrTruncatedEntryIsAMissAndIsReplaced) {
  auto cache = Open();
  const Key key = KeyFor("program");
  for (const char* damage : {"flip", "truncate", "garbage"}) {
    cache->Store(key, std::string(1000, 'x'), 1.0);
    std::vector<fs::path> files = Files();
    ASSERT_EQ(files.size(), 1u);
    const fs::path path = files[0];
    std::string bytes;
    {
      std::ifstream in(path, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    if (std::string(damage) == "flip") {
      bytes[bytes.size() - 10] ^= 1;
    } else if (std::string(damage) == "truncate") {
      bytes.resize(bytes.size() / 2);
    } else {
      bytes = "not an entry at all";
    }
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    ::testing::internal::CaptureStderr();
    EXPECT_FALSE(cache->Lookup(key).has_value()) << damage;
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(log.find("ignoring and removing"), std::string::npos) << damage << ": " << log;
    EXPECT_FALSE(fs::exists(path)) << damage;
  }
  EXPECT_EQ(cache->counters().corrupt, 3);
  cache->Store(key, "good", 1.0);
  EXPECT_TRUE(cache->Lookup(key).has_value());
}

TEST_F(CompileCacheTest, ConcurrentWritersLeaveOneWholeEntry) {
  // Two clusters compiling one program into one directory: each stores, last wins.
  const Key key = KeyFor("program");
  const std::string executable(1 << 20, 'e');
  std::vector<std::thread> writers;
  for (int i = 0; i < 8; ++i) {
    writers.emplace_back([&] {
      auto cache = Open();
      for (int j = 0; j < 5; ++j) cache->Store(key, executable, 2.0);
    });
  }
  for (std::thread& writer : writers) writer.join();
  auto cache = Open();
  std::optional<Hit> hit = cache->Lookup(key);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->executable, executable);
  EXPECT_EQ(Files().size(), 1u);  // no temporaries left behind
}

TEST_F(CompileCacheTest, AFullCacheEvictsTheLeastRecentlyUsed) {
  const std::string executable(1000, 'e');
  auto cache = Open(/*max_bytes=*/3000);  // two entries of ~1.4 kB with their headers
  const Key a = KeyFor("a"), b = KeyFor("b"), c = KeyFor("c");
  cache->Store(a, executable, 1.0);
  cache->Store(b, executable, 1.0);
  // Give the entries distinct ages, then use `a`: `b` is now the least recent.
  for (const fs::path& path : Files()) {
    fs::last_write_time(path, fs::last_write_time(path) - std::chrono::hours(1));
  }
  ASSERT_TRUE(cache->Lookup(a).has_value());
  cache->Store(c, executable, 1.0);
  EXPECT_TRUE(cache->Lookup(a).has_value());
  EXPECT_FALSE(cache->Lookup(b).has_value());
  EXPECT_TRUE(cache->Lookup(c).has_value());
  EXPECT_EQ(cache->counters().evictions, 1);
  // `switchyard cache prune` to a smaller size removes the older one of the rest.
  SY_ASSERT_OK_AND_ASSIGN(auto removed, Prune(CacheDirectory(root_.string()), 1500));
  EXPECT_EQ(removed.size(), 1u);
  EXPECT_EQ(Files().size(), 1u);
}

TEST_F(CompileCacheTest, ADirectoryThatCannotBeMadeIsUnavailable) {
  const std::string file = (root_ / "a-file").string();
  std::ofstream(file) << "x";
  auto cache = CompileCache::Open(file + "/cache", 0);
  EXPECT_EQ(cache.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(cache.status().message().find("cannot create"), std::string::npos);
}

TEST_F(CompileCacheTest, LocationsResolveOrSayHowToMountThem) {
  const std::string dir = root_.string();
  EXPECT_EQ(ResolveLocation(dir, "").value_or(""), dir);
  EXPECT_EQ(ResolveLocation("file://" + dir, "").value_or(""), dir);
  fs::create_directories(root_ / "bucket" / "scratch");
  EXPECT_EQ(ResolveLocation("gs://bucket/scratch", dir).value_or(""), dir + "/bucket/scratch");
  EXPECT_EQ(ResolveLocation("s3://bucket/scratch", dir + "/").value_or(""),
            dir + "/bucket/scratch");

  absl::Status no_root = ResolveLocation("gs://bucket/scratch", "").status();
  EXPECT_EQ(no_root.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_root.message().find("--storage_mount_root"), std::string::npos) << no_root;
  absl::Status not_mounted = ResolveLocation("gs://other/scratch", dir).status();
  EXPECT_EQ(not_mounted.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(not_mounted.message().find("gcsfuse other " + dir + "/other"), std::string::npos)
      << not_mounted;
  EXPECT_EQ(ResolveLocation(dir + "/missing", "").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ResolveLocation("relative/dir", "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResolveLocation("hdfs://x/y", "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResolveLocation("gs:///nobucket", dir).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace switchyard::compile_cache
