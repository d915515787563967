// The worker's side of the multi-host bootstrap: the store the plugin's kv callbacks
// reach, against a real resource manager in this process.

#include "worker/rm_kv_store.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rm/rm.h"

namespace switchyard::worker {
namespace {

class RmKeyValueStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rm::RmOptions options = rm::DefaultRmOptions();
    options.port = 0;
    auto server = rm::ResourceManagerServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    rm_ = std::move(*server);
    address_ = absl::StrCat("127.0.0.1:", rm_->port());
  }

  std::unique_ptr<rm::ResourceManagerServer> rm_;
  std::string address_;
};

TEST_F(RmKeyValueStoreTest, HostsOfOneSliceShareKeysAndSlicesDoNot) {
  RmKeyValueStore node0(address_, /*slice_index=*/3, "run1");
  RmKeyValueStore node1(address_, /*slice_index=*/3, "run1");
  RmKeyValueStore other_slice(address_, /*slice_index=*/4, "run1");
  RmKeyValueStore next_run(address_, /*slice_index=*/3, "run2");
  ASSERT_TRUE(node0.Put("local_topology/0", std::string("\x00\x01", 2)).ok());
  auto got = node1.Get("local_topology/0", absl::Seconds(1));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::string("\x00\x01", 2));
  EXPECT_EQ(other_slice.TryGet("local_topology/0").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(next_run.TryGet("local_topology/0").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(RmKeyValueStoreTest, GetWaitsForAPeersPutAndTimesOut) {
  RmKeyValueStore node0(address_, 0, "0");
  RmKeyValueStore node1(address_, 0, "0");
  std::thread later([&] {
    absl::SleepFor(absl::Milliseconds(200));
    ASSERT_TRUE(node1.Put("nccl_unique_id", "id").ok());
  });
  auto got = node0.Get("nccl_unique_id", absl::Seconds(10));
  later.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "id");
  auto missing = node0.Get("never", absl::Milliseconds(100));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(missing.status().message().find("never"), std::string::npos);
}

TEST_F(RmKeyValueStoreTest, PutOverwritesForARestartedHost) {
  RmKeyValueStore node(address_, 0, "0");
  ASSERT_TRUE(node.Put("local_topology/1", "old").ok());
  ASSERT_TRUE(node.Put("local_topology/1", "new").ok());
  EXPECT_EQ(*node.TryGet("local_topology/1"), "new");
}

}  // namespace
}  // namespace switchyard::worker
