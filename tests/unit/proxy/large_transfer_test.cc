#include "proxy/large_transfer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace switchyard::proxy {
namespace {

class LargeTransferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/sy-large-transfer-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    directory_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  std::string Write(uint64_t handle, const std::string& bytes) {
    const std::string path = LargeTransferPath(directory_, handle);
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  std::string directory_;
};

TEST_F(LargeTransferTest, TheFileNameNarrowsTheHandleAsJaxlibDoes) {
  EXPECT_EQ(LargeTransferPath("/d", 7), "/d/lt_7");
  EXPECT_EQ(LargeTransferPath("/d", (uint64_t{1} << 32) + 5), "/d/lt_5");
  EXPECT_EQ(LargeTransferPath("/d", 0xffffffffu), "/d/lt_-1");
}

TEST_F(LargeTransferTest, AFileBecomesTheHostBufferAndIsRemoved) {
  std::string data(20 << 20, '\0');  // several pieces
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  const std::string path = Write(3, data);
  absl::StatusOr<LargeTransferFile> file = LargeTransferFile::Open(path, data.size());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_FALSE(std::filesystem::exists(path));  // the name is free at once
  auto space = HostBytes::Allocate(data.size());
  ASSERT_TRUE(space.ok());
  HostBuffer buffer(*std::move(space));
  ASSERT_TRUE(file->ReadInto(buffer).ok());
  absl::StatusOr<absl::string_view> got = buffer.WaitAll(absl::Now());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == data);
}

TEST_F(LargeTransferTest, AFileCutShortWhileReadFailsTheBufferAndNotTheProxy) {
  // The client keeps its own descriptor and truncates the file after the proxy checked
  // its size: a mapping would fault (SIGBUS) past the new end.
  const std::string data(10 << 20, 'x');
  const std::string path = Write(8, data);
  const int client = open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(client, 0);
  absl::StatusOr<LargeTransferFile> file = LargeTransferFile::Open(path, data.size());
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(ftruncate(client, 3 << 20), 0);
  close(client);
  auto space = HostBytes::Allocate(data.size());
  ASSERT_TRUE(space.ok());
  HostBuffer buffer(*std::move(space));
  absl::Status read = file->ReadInto(buffer);
  EXPECT_EQ(read.code(), absl::StatusCode::kDataLoss) << read;
  EXPECT_NE(read.message().find("changed"), std::string::npos) << read;
  EXPECT_EQ(buffer.WaitAll(absl::Now()).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(LargeTransferTest, AMissingFileSaysWhereTheClientMustBe) {
  absl::StatusOr<LargeTransferFile> file =
      LargeTransferFile::Open(LargeTransferPath(directory_, 9), 4);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(file.status().message().find("--large_transfer_directory"), std::string::npos);
}

TEST_F(LargeTransferTest, AFileOfAnotherSizeIsRefusedAndRemoved) {
  const std::string path = Write(4, "abc");
  EXPECT_EQ(LargeTransferFile::Open(path, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(LargeTransferTest, LinksAndFifosAreRefusedWithoutBlocking) {
  const std::string secret = directory_ + "/secret";
  std::ofstream(secret) << "abcd";
  const std::string link = LargeTransferPath(directory_, 5);
  std::filesystem::create_symlink(secret, link);
  EXPECT_EQ(LargeTransferFile::Open(link, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(std::filesystem::exists(secret));  // what the link named stays
  const std::string fifo = LargeTransferPath(directory_, 6);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(LargeTransferFile::Open(fifo, 4).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace switchyard::proxy
