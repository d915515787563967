// The ordered operation stream to a worker, against a worker that is not there:
// every operation that asks for an answer gets UNAVAILABLE, exactly once.

#include <atomic>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proxy/fleet.h"
#include "switchyard/worker.pb.h"

namespace switchyard::proxy {
namespace {

TEST(WorkerConnectionTest, OperationsToAMissingWorkerFailOnceEach) {
  // Port 1 on loopback: nothing listens, so every stream fails at once and its reader
  // races the writer to fail what waits on it.
  WorkerConnection worker("127.0.0.1:1");
  std::atomic<int> answers{0};
  for (int i = 0; i < 300; ++i) {
    absl::Status status = worker.Await({static_cast<uint64_t>(i + 1)});
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
    DispatchRequest op;
    op.mutable_delete_buffers()->add_buffer_ids(i + 1);
    worker.Send(op, [&](absl::Status status) {
      EXPECT_FALSE(status.ok());
      ++answers;
    });
  }
  worker.Flush();
  EXPECT_EQ(answers.load(), 300);
}

}  // namespace
}  // namespace switchyard::proxy
