// What a sandboxed sidecar can and cannot reach, tried from inside by a shell script
// (the real sidecar runs the same way; the end-to-end tests try it from a tenant's
// colocated function).
#include "worker/sidecar_sandbox.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

extern char** environ;

namespace switchyard::worker {
namespace {

namespace fs = std::filesystem;

class SidecarSandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<SandboxedProcess> check = CheckSandbox();
    if (!check.ok()) GTEST_SKIP() << "no sandbox on this host: " << check.status();
    char pattern[] = "/tmp/sy-sandbox-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
    for (const char* dir : {"/shm", "/shm/own", "/shm/other", "/secrets", "/out"}) {
      fs::create_directory(root_ + dir);
    }
    std::ofstream(root_ + "/shm/other/theirs") << "another tenant's array";
    std::ofstream(root_ + "/secrets/key.pem") << "-----BEGIN PRIVATE KEY-----";
    std::ofstream(root_ + "/tls.key") << "-----BEGIN PRIVATE KEY-----";
  }
  void TearDown() override {
    if (!root_.empty()) fs::remove_all(root_);
  }

  // Runs `script` in a sandbox; returns its "name=value" lines.
  std::map<std::string, std::string> Run(const std::string& script) {
    SandboxPolicy policy;
    policy.hidden = {root_ + "/secrets", root_ + "/tls.key", root_ + "/missing"};
    policy.writable = {root_ + "/out"};
    policy.shared_directory = root_ + "/shm";
    policy.own_directory = root_ + "/shm/own";
    std::vector<std::string> env;
    for (char** entry = environ; *entry != nullptr; ++entry) env.push_back(*entry);
    const std::string results = root_ + "/shm/own/results";
    absl::StatusOr<SandboxedProcess> started = SpawnSandboxed(
        {"/bin/sh", "-c", absl::StrCat("exec >", results, " 2>/dev/null\n", script)}, env,
        /*stdio_fd=*/2, policy);
    EXPECT_TRUE(started.ok()) << started.status();
    if (!started.ok()) return {};
    int status = 0;
    waitpid(started->pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    std::map<std::string, std::string> lines;
    std::ifstream in(results);
    for (std::string line; std::getline(in, line);) {
      std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits('=', 1));
      lines[kv.first] = kv.second;
    }
    return lines;
  }

  std::string root_;
};

TEST_F(SidecarSandboxTest, SecretsAreHiddenAndOnlyItsOwnPlacesAreWritable) {
  const std::string r = root_;
  auto seen = Run(absl::StrCat(
      "cat ", r, "/tls.key >/dev/null && echo key=read || echo key=denied\n", "cat ", r,
      "/secrets/key.pem >/dev/null && echo secrets=read || echo secrets=denied\n",
      "echo others=$(ls -A ", r, "/shm | tr '\\n' ' ')\n", "cat ", r,
      "/shm/other/theirs >/dev/null && echo theirs=read || echo theirs=denied\n", "touch ", r,
      "/new && echo elsewhere=written || echo elsewhere=denied\n", "touch ", r,
      "/out/checkpoint && echo writable=written || echo writable=denied\n", "touch ", r,
      "/shm/own/scratch && echo own=written || echo own=denied\n", "echo uid=$(id -u)\n",
      "echo pid=$$\n", "test -e /proc/", getpid(),
      " && echo parent=visible || echo parent=invisible\n"));
  EXPECT_EQ(seen["key"], "denied");
  EXPECT_EQ(seen["secrets"], "denied");
  EXPECT_EQ(seen["others"], ".hidden own");
  EXPECT_EQ(seen["theirs"], "denied");
  EXPECT_EQ(seen["elsewhere"], "denied");
  EXPECT_EQ(seen["writable"], "written");
  EXPECT_EQ(seen["own"], "written");
  EXPECT_EQ(seen["uid"], std::to_string(geteuid()));
  EXPECT_EQ(seen["pid"], "1");
  EXPECT_EQ(seen["parent"], "invisible");
  // Outside, nothing changed but what it was allowed to write.
  EXPECT_TRUE(fs::exists(root_ + "/out/checkpoint"));
  EXPECT_FALSE(fs::exists(root_ + "/new"));
  EXPECT_TRUE(fs::exists(root_ + "/shm/other/theirs"));
}

TEST_F(SidecarSandboxTest, NoPrivilegeCanBeRegained) {
  // Root inside the namespace has no capabilities left: it cannot undo the mounts
  // that hide the secrets.
  auto seen =
      Run(absl::StrCat("umount ", root_, "/secrets && echo umount=done || echo umount=refused\n",
                       "grep CapEff /proc/self/status | tr -d '\\t' | sed 's/:/=/'\n",
                       "grep NoNewPrivs /proc/self/status | tr -d '\\t' | sed 's/:/=/'\n"));
  EXPECT_EQ(seen["umount"], "refused");
  EXPECT_EQ(seen["CapEff"], "0000000000000000");
  EXPECT_EQ(seen["NoNewPrivs"], "1");
}

TEST(SidecarSandboxPolicyTest, TheOwnDirectoryMustSitInTheSharedOne) {
  SandboxPolicy policy;
  policy.shared_directory = "/dev/shm";
  policy.own_directory = "/tmp/elsewhere";
  EXPECT_EQ(SpawnSandboxed({"/bin/true"}, {}, 2, policy).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace switchyard::worker
