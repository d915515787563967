// How a sidecar's end reaches its caller. A shell script stands in for the Python
// sidecar (it ignores `-m switchyard.sidecar`): the protocol itself is exercised by the
// end-to-end tests with real sidecars.
#include "worker/sidecar_process.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"

namespace switchyard::worker {
namespace {

std::string Script(const std::string& name, const std::string& body) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path =
      std::string(dir != nullptr ? dir : "/tmp") + "/" + name + "-" + std::to_string(getpid());
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  chmod(path.c_str(), 0755);
  return path;
}

SidecarRequest Start() {
  SidecarRequest request;
  request.set_call(1);
  request.mutable_start()->set_host(0);
  return request;
}

TEST(SidecarProcessTest, AnExitIsReportedWithItsStatus) {
  auto process = SidecarProcess::Spawn(Script("exits", "exit 3"), "test");
  ASSERT_TRUE(process.ok()) << process.status();
  auto reply = (*process)->Call(Start(), absl::Now() + absl::Seconds(30));
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(reply.status().message().find("exited with status 3"), std::string::npos)
      << reply.status();
  EXPECT_FALSE((*process)->alive());
  EXPECT_EQ((*process)->Call(Start(), absl::Now() + absl::Seconds(1)).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(SidecarProcessTest, ACrashNamesItsSignal) {
  auto process = SidecarProcess::Spawn(Script("crashes", "kill -9 $$"), "test");
  ASSERT_TRUE(process.ok()) << process.status();
  auto reply = (*process)->Call(Start(), absl::Now() + absl::Seconds(30));
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(reply.status().message().find("killed by signal 9"), std::string::npos)
      << reply.status();
}

TEST(SidecarProcessTest, APastDeadlineStopsTheProcess) {
  auto process = SidecarProcess::Spawn(Script("hangs", "exec sleep 60"), "test");
  ASSERT_TRUE(process.ok()) << process.status();
  const pid_t pid = (*process)->pid();
  auto reply = (*process)->Call(Start(), absl::Now() + absl::Milliseconds(200));
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE((*process)->alive());
  EXPECT_NE(kill(pid, 0), 0);  // reaped: no such process
}

TEST(SidecarProcessTest, ACallerThatGoesAwayStopsTheProcess) {
  auto process = SidecarProcess::Spawn(Script("busy", "exec sleep 60"), "test");
  ASSERT_TRUE(process.ok()) << process.status();
  const pid_t pid = (*process)->pid();
  const absl::Time gone = absl::Now() + absl::Milliseconds(300);
  auto reply =
      (*process)->Call(Start(), absl::InfiniteFuture(), [gone] { return absl::Now() > gone; });
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kCancelled) << reply.status();
  EXPECT_FALSE((*process)->alive());
  EXPECT_NE(kill(pid, 0), 0);
}

TEST(SidecarProcessTest, AMissingInterpreterIsAClearError) {
  auto process = SidecarProcess::Spawn("/nonexistent/python3", "test");
  // posix_spawn reports a missing file at once, or the child exits 127.
  if (process.ok()) {
    auto reply = (*process)->Call(Start(), absl::Now() + absl::Seconds(30));
    EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnavailable) << reply.status();
  } else {
    EXPECT_EQ(process.status().code(), absl::StatusCode::kFailedPrecondition);
  }
}

}  // namespace
}  // namespace switchyard::worker
