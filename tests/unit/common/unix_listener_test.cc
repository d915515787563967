#include "common/unix_listener.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/synchronization/mutex.h"
#include "common/grpc_server.h"
#include "gtest/gtest.h"
#include "switchyard/rm.grpc.pb.h"

namespace switchyard {
namespace {

// Answers GetFleet, remembering who asked.
class Recorder final : public ResourceManager::Service {
 public:
  grpc::Status GetFleet(grpc::ServerContext* context, const GetFleetRequest*, Fleet*) override {
    absl::MutexLock lock(&mutex_);
    identity_ = PeerIdentity(context->peer());
    return grpc::Status::OK;
  }
  std::string identity() {
    absl::MutexLock lock(&mutex_);
    return identity_;
  }

 private:
  absl::Mutex mutex_;
  std::string identity_;
};

// A directory of this test's own (0700).
class UnixListenerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/sy-unix-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    path_ = dir_ + "/server.sock";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  grpc::Status Ask(const std::string& address) {
    auto stub = ResourceManager::NewStub(CreateChannel(address));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    Fleet fleet;
    return stub->GetFleet(&context, GetFleetRequest(), &fleet);
  }

  std::string dir_;
  std::string path_;
};

TEST_F(UnixListenerTest, ServesThisUserAndNamesTheCallingProcess) {
  Recorder recorder;
  auto started = StartGrpcServer(absl::StrCat(kUnixScheme, path_), 0, {&recorder});
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_EQ(started->address, absl::StrCat("unix:", path_));
  struct stat st;
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_TRUE(Ask(started->address).ok());
  EXPECT_EQ(recorder.identity(), absl::StrCat("unix pid ", getpid()));
  started->Shutdown(std::chrono::system_clock::now());
  started->server->Wait();
  started->unix_listener.reset();
  EXPECT_NE(access(path_.c_str(), F_OK), 0) << "the socket file outlived its server";
}

TEST_F(UnixListenerTest, ADirectoryOthersMayWriteIsRefused) {
  ASSERT_EQ(chmod(dir_.c_str(), 01777), 0);
  Recorder recorder;
  auto started = StartGrpcServer(absl::StrCat(kUnixScheme, path_), 0, {&recorder});
  EXPECT_EQ(started.status().code(), absl::StatusCode::kFailedPrecondition) << started.status();
  EXPECT_NE(started.status().message().find("other users"), std::string::npos);
}

TEST_F(UnixListenerTest, AStaleSocketIsReplacedAndALiveOneIsNot) {
  {  // a socket file whose process is gone
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path_.c_str(), sizeof(address.sun_path) - 1);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    close(fd);
  }
  Recorder recorder;
  auto first = StartGrpcServer(absl::StrCat(kUnixScheme, path_), 0, {&recorder});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = StartGrpcServer(absl::StrCat(kUnixScheme, path_), 0, {&recorder});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  // The refused second server did not take the first one's socket away.
  EXPECT_TRUE(Ask(first->address).ok());
  first->Shutdown(std::chrono::system_clock::now());
  first->server->Wait();
}

TEST_F(UnixListenerTest, AnotherUserIsRefusedEvenWhereTheFileWouldLetThemIn) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to be another user";
  Recorder recorder;
  auto started = StartGrpcServer(absl::StrCat(kUnixScheme, path_), 0, {&recorder});
  ASSERT_TRUE(started.ok()) << started.status();
  // Open the way on purpose: only the credentials check is left.
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  ASSERT_EQ(chmod(path_.c_str(), 0666), 0);
  const pid_t child = fork();
  if (child == 0) {
    // As nobody: connect, then read. A server that took the connection would send its
    // HTTP/2 settings; a refused one is closed at once (end of file, or a reset as our
    // preface went unread).
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path_.c_str(), sizeof(address.sun_path) - 1);
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) _exit(3);
    const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    // The server may have closed already: a plain write would die of SIGPIPE.
    (void)!send(fd, preface, sizeof(preface) - 1, MSG_NOSIGNAL);
    char byte;
    _exit(read(fd, &byte, 1) <= 0 ? 0 : 4);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: could not connect; 4: the server answered";
  EXPECT_EQ(started->unix_listener->refused(), 1);
  // This user still gets in.
  EXPECT_TRUE(Ask(started->address).ok());
  started->Shutdown(std::chrono::system_clock::now());
  started->server->Wait();
}

TEST(UnixPeerTest, OnlyAcceptedDescriptorsNameAProcess) {
  EXPECT_FALSE(UnixPeer("ipv4:127.0.0.1:80").has_value());
  EXPECT_FALSE(UnixPeer("fd:").has_value());
  EXPECT_FALSE(UnixPeer("fd:x").has_value());
}

}  // namespace
}  // namespace switchyard
